-- Prelude of every algorithm script: Go puts it in front of
-- fixed_window.lua, sliding_window.lua, token_bucket.lua and gcra.lua.
-- KEYS[1] is the limit's state, KEYS[2] the identifier's index (read by
-- Reset); ARGV[1] is the time in µs ("" = Redis TIME), ARGV[5] the state's
-- member in the index.

-- clock returns the time in microseconds: the caller's (tests only) or Redis's.
local function clock()
  if ARGV[1] == "" then
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return tonumber(ARGV[1])
end

-- keep gives the state a TTL of ttl ms, lists a new state in the
-- identifier's index, and makes the index outlive every state it lists.
-- An empty member (ARGV[5]) means a state that is never reset: no index.
local function keep(ttl, new)
  redis.call("PEXPIRE", KEYS[1], ttl)
  if ARGV[5] == "" then
    return
  end
  if new then
    redis.call("SADD", KEYS[2], ARGV[5])
  end
  if redis.call("PTTL", KEYS[2]) < ttl then
    redis.call("PEXPIRE", KEYS[2], ttl)
  end
end

