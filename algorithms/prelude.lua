-- Prelude of the script: Go puts it in front of the algorithms
-- (fixed_window.lua, sliding_window.lua, token_bucket.lua, gcra.lua) and of
-- batch.lua, which calls them. Each algorithm is a function
--   f(state, index, member, now, limit, third, hits, write, always)
-- of one request: its state key, its identifier's index set and its member
-- there (member "" = never reset: no index), the time in µs, the limit,
-- the window in µs (the token bucket: its refill rate in tokens per second),
-- the hits; write false decides without counting (a request of a group that
-- is already rejected), always true counts the hits even over the limit.
-- It appends to out what the state was before the request (batch.lua says
-- how) and returns whether the hits were within the limit, then what undoes
-- its write: the key written (nil when nothing was), and the state's old
-- values. Go computes the decision's remaining, reset and retry from the
-- state before (decide.go, the arithmetic the memory store uses); the
-- script only decides and counts.
local out, nout = {}, 1

local function put(v)
  nout = nout + 1
  out[nout] = v
end

-- keep gives a state key a TTL of ttl ms, lists a new state in the
-- identifier's index, and makes the index outlive every state it lists.
local function keep(key, index, member, ttl, new)
  redis.call("PEXPIRE", key, ttl)
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

-- count adds hits to a window's counter key unless write is false or the
-- request is a peek: it returns the count before, and whether it wrote.
local function count(key, hits, write)
  if hits == 0 or not write then
    return tonumber(redis.call("GET", key)) or 0, false
  end
  return redis.call("INCRBY", key, hits) - hits, true
end

-- uncount takes hits back from a window's counter key (before: its count
-- before they were added).
local function uncount(key, hits, before)
  if before == 0 then
    redis.call("DEL", key)
  else
    redis.call("DECRBY", key, hits)
  end
end
