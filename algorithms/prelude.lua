-- Prelude of the script: Go puts it in front of the algorithms
-- (fixed_window.lua, sliding_window.lua, token_bucket.lua, gcra.lua) and of
-- batch.lua, which calls them. Each algorithm is a function
--   f(state, index, member, now, limit, third, hits)
-- of one request: its state key, its identifier's index set (read by
-- Reset), its member in that index ("" = never reset: no index), the time
-- in µs, the limit, the window in µs (the token bucket: its refill rate in
-- tokens per second) and the hits. It returns
--   {allowed 0|1, remaining, reset_us, retry_us, now_us}.
-- No function reads KEYS or ARGV, and none builds a table but its reply:
-- a batch of many requests costs Redis little more than its commands.

-- keep gives the state a TTL of ttl ms, lists a new state in the
-- identifier's index, and makes the index outlive every state it lists.
local function keep(state, index, member, ttl, new)
  redis.call("PEXPIRE", state, ttl)
  if member == "" then
    return
  end
  if new then
    redis.call("SADD", index, member)
  end
  if redis.call("PTTL", index) < ttl then
    redis.call("PEXPIRE", index, ttl)
  end
end
