-- write.lua records demands of one shared limit (docs/rlqs.md).
-- KEYS[1]  the limit's demands: a hash, instance -> "rate|expires (ms, Redis TIME)"
-- ARGV[1]  how long a demand lives unless written again, ms
-- ARGV[2]  the hash's TTL, ms (longer: it outlives every demand it holds)
-- ARGV[3…] instance, rate pairs (rate -1: not known yet)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[1])
for i = 3, #ARGV, 2 do
  redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1] .. "|" .. expires)
end
redis.call("PEXPIRE", KEYS[1], ARGV[2])
return 1
