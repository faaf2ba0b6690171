-- The sync of approximate limits (approxsync.go): adds to each window's
-- counter the hits one replica admitted since its last sync, and returns the
-- totals, so the replica sees every replica's hits.
-- KEYS: the counters, each followed by its previous window's counter when
-- that is asked for, and by its identifier's index when it has one (a REST
-- limit, which Reset finds through it); on a Cluster only the first key is
-- declared (to route the call) and all of them are in ARGV.
-- ARGV[1]: "" when the keys are KEYS, else how many keys follow in ARGV.
-- Then per counter: the hits, the TTL in ms of a counter this call makes,
-- "1" when its previous counter follows it, and its member in the index
-- ("" for none).
-- Reply: Redis TIME (s, µs), then per counter: its total, and the previous
-- counter's (-1 when not asked).
local keys = KEYS
local at = 2
if ARGV[1] ~= '' then
  local n = tonumber(ARGV[1])
  keys = {}
  for i = 1, n do keys[i] = ARGV[1 + i] end
  at = 2 + n
end
local t = redis.call('TIME')
local out = {tonumber(t[1]), tonumber(t[2])}
local k = 1
for i = at, #ARGV, 4 do
  local hits = tonumber(ARGV[i])
  local total = redis.call('INCRBY', keys[k], hits)
  if total == hits then
    redis.call('PEXPIRE', keys[k], ARGV[i + 1])
  end
  k = k + 1
  local prev = -1
  if ARGV[i + 2] == '1' then
    prev = tonumber(redis.call('GET', keys[k]) or '0')
    k = k + 1
  end
  if ARGV[i + 3] ~= '' then
    local ttl = tonumber(ARGV[i + 1])
    redis.call('SADD', keys[k], ARGV[i + 3])
    if redis.call('PTTL', keys[k]) < ttl then
      redis.call('PEXPIRE', keys[k], ttl)
    end
    k = k + 1
  end
  out[#out + 1] = total
  out[#out + 1] = prev
end
return out
