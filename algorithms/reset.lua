-- Reset: delete the state keys an identifier's index lists, all of them or
-- only those of one algorithm, and return how many existed.
-- KEYS[1] the identifier's index set
-- ARGV: key prefix of the identifier ("throttle:{…}:"), algorithm code ("" = all)
local members = redis.call("SMEMBERS", KEYS[1])
local prefix, code = ARGV[1], ARGV[2]
local deleted = 0
for _, m in ipairs(members) do
  if code == "" or string.sub(m, 1, #code + 1) == code .. ":" then
    deleted = deleted + redis.call("DEL", prefix .. m)
    redis.call("SREM", KEYS[1], m)
  end
end
if redis.call("SCARD", KEYS[1]) == 0 then
  redis.call("DEL", KEYS[1])
end
return deleted
