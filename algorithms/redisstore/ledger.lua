-- The ledger of one owner's outstanding reservations (ledger.go): a
-- sorted set of ids scored by expiry (µs of Redis TIME). Expired ids are
-- dropped first, so an id nobody settles leaves by itself at its expiry.
-- KEYS[1] the ledger. ARGV[1] "claim" or "list"; ARGV[2] the time ("" =
-- Redis TIME). claim: ARGV[3] the most ids the ledger may hold, then
-- pairs of id and TTL in µs: all are added, or none when they would pass
-- the most; returns {ids held before, 1 added or 0}. list: returns the ids
-- held.
local now
if ARGV[2] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", string.format("%d", now))
if ARGV[1] == "list" then
  return redis.call("ZRANGE", KEYS[1], 0, -1)
end
local n = redis.call("ZCARD", KEYS[1])
if n + (#ARGV - 3) / 2 > tonumber(ARGV[3]) then
  return {n, 0}
end
local far = 0
for i = 4, #ARGV, 2 do
  local exp = now + tonumber(ARGV[i + 1])
  redis.call("ZADD", KEYS[1], string.format("%d", exp), ARGV[i])
  if exp > far then far = exp end
end
local ttl = math.ceil((far - now) / 1000) + 1000
if redis.call("PTTL", KEYS[1]) < ttl then
  redis.call("PEXPIRE", KEYS[1], string.format("%d", ttl))
end
return {n, 1}
