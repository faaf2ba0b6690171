-- Clear: delete the state of each request's key and limit, and return how
-- many existed. ARGV[1]: the time in µs ("" = Redis TIME); ARGV[2]: per
-- request, packed little-endian, the algorithm (as in batch.lua) and the
-- window µs (a double; 0 for the token bucket). ARGV[3]: "" when KEYS holds
-- the state keys, else their number and they follow in ARGV (Cluster).
-- Then, per request, the master's index of holds: the holds of each state
-- are marked cleared (forget.lua).
local now
if ARGV[1] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local keys, k, m = KEYS, 0, 3
if ARGV[3] ~= "" then
  keys, k, m = ARGV, 3, 3 + tonumber(ARGV[3])
end
local blob, pos, i, cleared = ARGV[2], 1, 0, 0
while pos <= #blob do
  local alg, window
  alg, window, pos = struct.unpack("<Bd", blob, pos)
  i = i + 1
  local key, n = keys[k + i], 0
  forget_holds(key, ARGV[m + i], now)
  if alg <= 2 then
    -- A window's counters: the current one, and for the sliding window
    -- the one before (a fixed window never reads it).
    local num = (now - now % window) / window
    local cur, prev = key .. ":" .. string.format("%d", num), key .. ":" .. string.format("%d", num - 1)
    n = redis.call("DEL", cur, prev)
    redis.call("DEL", cur .. ":l", prev .. ":l") -- an approximate limit's leases
  else
    n = redis.call("DEL", key)
  end
  if n > 0 then
    cleared = cleared + 1
  end
end
return cleared
