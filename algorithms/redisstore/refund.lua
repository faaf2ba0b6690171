-- Refund: take back hits counted for requests whose all-or-nothing group
-- was rejected on another Redis Cluster master. ARGV[1]: the time in µs the
-- requests were decided at; ARGV[2]: per request, packed little-endian, the
-- algorithm (as in batch.lua), limit, window µs or refill rate, hits
-- (doubles); ARGV[3]: "" when KEYS holds the requests' state keys, else
-- their number, and they follow in ARGV (on a Cluster: KEYS[1], the first,
-- routes the call).
-- A window's count goes down by the hits (the counter is deleted at zero);
-- a token bucket gets its tokens back (up to its capacity); a GCRA's TAT
-- moves back by hits × T (not before the time of the decision).
local now = tonumber(ARGV[1])
local blob, pos, i = ARGV[2], 1, 0
local keys, k = KEYS, 0
if ARGV[3] ~= "" then
  keys, k = ARGV, 3
end
while pos <= #blob do
  local alg, limit, third, hits
  alg, limit, third, hits, pos = struct.unpack("<Bddd", blob, pos)
  i = i + 1
  local key = keys[k + i]
  if alg <= 2 then
    local wkey = key .. ":" .. string.format("%d", (now - now % third) / third)
    if redis.call("DECRBY", wkey, string.format("%d", hits)) <= 0 then
      redis.call("DEL", wkey)
    end
  elseif alg == 3 then
    local t = tonumber(redis.call("HGET", key, "t"))
    if t then
      redis.call("HSET", key, "t", string.format("%.17g", math.min(limit, t + hits)))
    end
  else
    local st = redis.call("HMGET", key, "t", "r")
    if st[1] then
      local g, b = limit, third
      while b > 0 do
        g, b = b, g % b
      end
      local p, c = limit / g, third / g
      -- TAT in units from the decision's time.
      local level = (tonumber(st[1]) - now) * p + tonumber(st[2]) - hits * c
      if level < 0 then level = 0 end
      local q = math.floor(level / p)
      redis.call("HSET", key, "t", string.format("%d", now + q), "r", string.format("%d", level - q * p))
    end
  end
end
return i
