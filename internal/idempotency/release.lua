-- Release deletes a record of one client and takes it out of the client's
-- quota. KEYS as put.lua's; ARGV[1] the member.
local size = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
if redis.call('HDEL', KEYS[3], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[3], '#', -size)
end
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
