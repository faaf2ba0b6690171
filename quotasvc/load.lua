-- load.lua writes this replica's demands of one shared limit, then returns
-- the limit's allocation for the epoch (or a later one) as {1, allocation},
-- or, when there is none, every live demand as {0, instance, rate, …},
-- dropping the expired ones (docs/rlqs.md).
-- KEYS[1]  the demands: a hash, instance -> "rate|expires (ms, Redis TIME)"
-- KEYS[2]  the allocation: "epoch|fill|grants"
-- ARGV[1]  the epoch
-- ARGV[2]  how long a demand lives unless written again, ms
-- ARGV[3]  the hash's TTL, ms
-- ARGV[4…] instance, rate pairs
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if #ARGV >= 4 then
  local expires = now + tonumber(ARGV[2])
  for i = 4, #ARGV, 2 do
    redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1] .. "|" .. expires)
  end
  redis.call("PEXPIRE", KEYS[1], ARGV[3])
end
local cur = redis.call("GET", KEYS[2])
if cur then
  local e = tonumber(string.match(cur, "^(%d+)|"))
  if e and e >= tonumber(ARGV[1]) then
    return {1, cur}
  end
end
local all = redis.call("HGETALL", KEYS[1])
local out = {0}
for i = 1, #all, 2 do
  local rate, x = string.match(all[i + 1], "^([^|]*)|(%d+)$")
  if x == nil or tonumber(x) <= now then
    redis.call("HDEL", KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = rate
  end
end
return out
