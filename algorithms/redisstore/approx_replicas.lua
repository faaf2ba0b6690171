-- The registry of the replicas that decide approximate limits: each one, at
-- every sync, notes itself with Redis's time, forgets the ones not heard of
-- for ARGV[2] ms, and reads how many there are and its rank among them (the
-- shares of what is left of a limit divide by the count; the rank spreads
-- the remainder, so the shares add up to what is left exactly).
-- KEYS[1]: the registry (a sorted set). ARGV[1]: the replica's id;
-- ARGV[2]: how long a replica counts after it was last heard of, in ms;
-- ARGV[3]: "1" to leave.
-- Reply: {count, rank}.
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {0, 0}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], ms, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return {redis.call('ZCARD', KEYS[1]), redis.call('ZRANK', KEYS[1], ARGV[1])}
