-- The registry of the replicas that decide approximate limits: each one, at
-- every sync, notes itself with Redis's time, forgets the ones not heard of
-- for ARGV[2] ms, and reads how many there are (a lease is capped by what
-- is left of a limit divided by the count, and so is the blind budget).
-- KEYS[1]: the registry (a sorted set). ARGV[1]: the replica's id;
-- ARGV[2]: how long a replica counts after it was last heard of, in ms;
-- ARGV[3]: "1" to leave.
-- Reply: {count}.
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {0}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return {redis.call('ZCARD', KEYS[1])}
