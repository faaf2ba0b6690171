-- Put stores a kept reply of one client and evicts the client's oldest
-- while it keeps more than its quota. All keys share the client's hash tag.
-- KEYS[1] the record, KEYS[2] the client's index (sorted set: member → the
-- time its record expires, ms; raised by a microsecond past the newest so
-- that puts within one millisecond keep their order: the oldest is evicted
-- first, never the reply just put for an older one), KEYS[3] the client's sizes (hash: member →
-- bytes, and "#" → their sum).
-- ARGV[1] the value, ARGV[2] ttl ms, ARGV[3] member, ARGV[4] the prefix of
-- the client's records (prefix .. member is a record's key), ARGV[5] most
-- records (0: no bound), ARGV[6] most bytes (0: no bound).
-- Returns how many records it evicted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, member, prefix = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local maxRecords, maxBytes = tonumber(ARGV[5]), tonumber(ARGV[6])

local function forget(m)
  local size = tonumber(redis.call('HGET', KEYS[3], m) or '0')
  redis.call('HDEL', KEYS[3], m)
  redis.call('HINCRBY', KEYS[3], '#', -size)
  redis.call('ZREM', KEYS[2], m)
end

for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  forget(m) -- expired: Redis dropped the record itself
end
if redis.call('ZSCORE', KEYS[2], member) then
  forget(member)
end
local score = now + ttl
local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
if newest and tonumber(newest) >= score then
  score = tonumber(newest) + 0.001
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], score, member)
redis.call('HSET', KEYS[3], member, #ARGV[1])
redis.call('HINCRBY', KEYS[3], '#', #ARGV[1])

local evicted = 0
while true do
  local n = redis.call('ZCARD', KEYS[2])
  local bytes = tonumber(redis.call('HGET', KEYS[3], '#') or '0')
  if n == 0 or ((maxRecords == 0 or n <= maxRecords) and (maxBytes == 0 or bytes <= maxBytes)) then
    break
  end
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  forget(oldest)
  redis.call('DEL', prefix .. oldest)
  evicted = evicted + 1
end
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return evicted
