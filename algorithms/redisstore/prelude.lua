-- Prelude of the script: Go puts it in front of the algorithms
-- (fixed_window.lua, sliding_window.lua, token_bucket.lua, gcra.lua) and of
-- batch.lua, which calls them. Each algorithm is a function
--   f(state, index, member, now, limit, third, hits, write, always)
-- of one request: its state key, its identifier's index set and its member
-- there (member "" = never reset: no index), the time in µs, the limit,
-- the window in µs (the token bucket: its refill rate in tokens per second),
-- the hits (negative: a refund of that many); write false decides without
-- counting (a request of a group that is already rejected), always true
-- counts the hits even over the limit.
-- It appends to out what the state was before the request (batch.lua says
-- how) and returns whether the hits were within the limit, then what undoes
-- its write: the key written (nil when nothing was), and the state's old
-- values. Go computes the decision's remaining, reset and retry from the
-- state before (decide.go, the arithmetic the memory store uses); the
-- script only decides and counts.
local out, nout = {}, 1

-- itoa is the text of an integer, made once per batch: redis.call would
-- print a number argument with "%.17g", and Lua a number in a
-- concatenation with "%.14g", both far dearer than "%d" (the same
-- numbers — hits, a window's TTL, its number — recur through a batch).
local texts = {}
local function itoa(n)
  local s = texts[n]
  if not s then
    s = string.format("%d", n)
    texts[n] = s
  end
  return s
end

local function put(v)
  nout = nout + 1
  out[nout] = v
end

-- index lists a new state in the identifier's index and makes the index
-- outlive every state it lists (ttl ms). Nothing for a state that is never
-- reset (member "").
local function index_state(index, member, ttl, new)
  if member == "" then
    return
  end
  if new then
    redis.call("SADD", index, member)
  end
  if redis.call("PTTL", index) < ttl then
    redis.call("PEXPIRE", index, itoa(ttl))
  end
end

-- keep gives a state key a TTL of ttl ms and indexes it.
local function keep(key, index, member, ttl, new)
  redis.call("PEXPIRE", key, itoa(ttl))
  index_state(index, member, ttl, new)
end

-- window_key is the key of a window's counter: "<state>:<window number>".
local function window_key(state, num)
  return state .. ":" .. itoa(num)
end

-- count adds hits to a window's counter unless write is false, the request
-- is a peek, or it cannot be within the limit (within0: it would be with a
-- count of zero; always: counted anyway). A new counter is made with its TTL
-- of ttl ms in one command. It returns the count before, and whether it
-- wrote.
local function count(key, hits, write, within0, always, ttl)
  if hits == 0 or not write or not (within0 or always) then
    return tonumber(redis.call("GET", key)) or 0, false
  end
  if redis.call("SET", key, itoa(hits), "PX", itoa(ttl), "NX") then
    return 0, true
  end
  return redis.call("INCRBY", key, itoa(hits)) - hits, true
end

-- refund gives back up to -hits (hits < 0) of a window's counter unless
-- write is false; the counter keeps its TTL (and stays, at 0). It returns
-- the count before, and the hits it took back (negative) when it wrote.
local function refund(key, hits, write)
  local before = tonumber(redis.call("GET", key)) or 0
  local back = math.min(before, -hits)
  if back == 0 or not write then
    return before, nil
  end
  redis.call("DECRBY", key, itoa(back))
  return before, -back
end

-- uncount takes hits back from a window's counter (before: its count
-- before they were added).
local function uncount(key, hits, before)
  if before == 0 then
    redis.call("DEL", key)
  else
    redis.call("DECRBY", key, itoa(hits))
  end
end
