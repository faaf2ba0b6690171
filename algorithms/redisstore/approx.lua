-- The call of approximate limits (approxsync.go, approxask.go): one
-- replica reports the hits it admitted in each window since its last call,
-- and takes a new lease of it. A window's counter holds what every replica
-- admitted plus every replica's unexpired lease not yet spent, never more
-- than the limit by a lease; its lease hash holds each replica's lease and
-- when it expires ("<lease>:<expiry µs>", Redis's clock). Every call first
-- gives back the leases that have expired (their holder did not renew
-- them in time: dead, or cut off), whoever held them. A report's hits come
-- out of the replica's unexpired lease first (already counted), the rest
-- are added; then the replica's lease becomes its target, capped by what
-- is left divided among the replicas (an ask's need never raises it), never
-- past what is left: the unused part of the old lease goes back. The new
-- lease expires a lease TTL after this call.
-- A report is counted once: it carries the replica's running total of the
-- hits it sent for the window, kept in the lease hash ("r:<id>"), and only
-- what the total adds to the one stored counts. A call whose answer was
-- lost (it reached Redis; the replica sends its hits again) or one that
-- arrives after a later one adds nothing twice. Without a stored total
-- (the window's first report, or after a reset) the hits count as sent.
-- Hits taken back after a call carried them (their all-or-nothing group
-- was void) come off the counter the same way: a running total of them
-- ("b:<id>"), and what it adds is subtracted.
-- KEYS per counter: the counter; its previous window's counter (a sliding
-- window); its lease hash; its identifier's index when it has one (a REST
-- limit, which Reset finds through it). On a Cluster only the first key is
-- declared (to route the call) and all of them are in ARGV.
-- ARGV[1]: "" when the keys are KEYS, else how many keys follow in ARGV.
-- Then: the replica's id, how many replicas there are. Then per counter:
-- the hits, the TTL in ms of the keys this call makes, the limit, the
-- window in µs for a sliding window ("0": a fixed one, no previous
-- counter), the window's number, the target lease, the least lease an ask
-- needs, its member in the index ("" for none), the lease TTL in µs, and
-- the replica's running total of the hits it sent in the window's calls,
-- these included, its running total of hits taken back after they were
-- sent, and what that total grew by since the last answer.
-- Reply: Redis TIME (s, µs), then per counter: its count after the call,
-- the replica's lease, the previous counter's count (-1: none), and by how
-- much the hits this call added took the count past the limit (the excess
-- Redis saw: blind hits reported late).
local keys = KEYS
local at = 2
if ARGV[1] ~= '' then
  local n = tonumber(ARGV[1])
  keys = {}
  for i = 1, n do keys[i] = ARGV[1 + i] end
  at = 2 + n
end
local id, replicas = ARGV[at], tonumber(ARGV[at + 1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {tonumber(t[1]), tonumber(t[2])}
local total, backs = 'r:' .. id, 'b:' .. id -- this replica's running totals in a lease hash
-- sweep gives back the expired leases of lease hash h at now, and
-- returns them with this replica's unexpired lease and its stored running
-- totals of hits sent and taken back (nil: none). A lease written
-- without an expiry (before leases expired) lapses with its window.
local function sweep(h)
  local all = redis.call('HGETALL', h)
  local expired, mine, stored, storedBack = 0, 0, nil, nil
  for j = 1, #all, 2 do
    local f, v = all[j], all[j + 1]
    local sep = string.find(v, ':', 1, true)
    local amount, expiry = tonumber(v), math.huge
    if sep then
      amount, expiry = tonumber(string.sub(v, 1, sep - 1)), tonumber(string.sub(v, sep + 1))
    end
    if f == total then
      stored = amount
    elseif f == backs then
      storedBack = amount
    elseif string.sub(f, 2, 2) == ':' then -- another replica's total
    elseif expiry <= now then
      expired = expired + amount
      redis.call('HDEL', h, f)
    elseif f == id then
      mine = amount
    end
  end
  return expired, mine, stored, storedBack
end
local k = 1
for i = at + 2, #ARGV, 12 do
  local hits, ttl, limit = tonumber(ARGV[i]), ARGV[i + 1], tonumber(ARGV[i + 2])
  local window, num = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local target, need, member = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]), ARGV[i + 7]
  local leasettl, sent = tonumber(ARGV[i + 8]), tonumber(ARGV[i + 9])
  local back, taken = tonumber(ARGV[i + 10]), tonumber(ARGV[i + 11])
  local key = keys[k]
  k = k + 1
  local prev, weight = -1, 0
  if window > 0 then
    prev = tonumber(redis.call('GET', keys[k]) or '0')
    k = k + 1
    local elapsed = math.min(math.max(now - num * window, 0), window)
    weight = math.ceil(prev * (window - elapsed) / window)
  end
  local lease = keys[k]
  k = k + 1
  local before = redis.call('GET', key)
  local existed, held, expired, stored, storedBack = before ~= false, 0, 0, nil, nil
  if existed then
    expired, held, stored, storedBack = sweep(lease)
  else
    taken = 0 -- nothing left to take them back from
    redis.call('DEL', lease) -- a counter reset or expired: its leases are gone
  end
  if stored then
    hits = math.max(sent - stored, 0) -- what this report adds to the last
  end
  if sent > (stored or 0) then
    redis.call('HSET', lease, total, sent)
    redis.call('PEXPIRE', lease, ttl)
  end
  if storedBack then
    taken = math.max(back - storedBack, 0)
  end
  if back > (storedBack or 0) then
    redis.call('HSET', lease, backs, back)
    redis.call('PEXPIRE', lease, ttl)
  end
  before = tonumber(before or '0')
  local covered = math.min(hits, held)
  held = held - covered
  local count = math.max(before - expired - taken, 0) + hits - covered
  -- The excess these hits made: past the limit by more than before.
  local excess = math.max(count + weight - limit, 0) - math.max(before - expired - taken + weight - limit, 0)
  local room = limit - weight - count + held -- what this replica may hold
  -- At most this replica's share of what is left, whatever an ask needs:
  -- one request past its share (a large hits_addend) is decided exactly,
  -- never by leasing the others' share to one replica.
  -- (need is the least an ask wants: it raises the target, not the share.)
  local grant = math.min(target, math.ceil(room / replicas), room)
  grant = math.max(grant, 0)
  count = math.max(count - held + grant, 0)
  if count ~= before then
    if not existed then
      redis.call('SET', key, count, 'PX', ttl)
    else
      redis.call('INCRBY', key, count - before)
    end
  end
  if grant > 0 then
    redis.call('HSET', lease, id, string.format('%.0f:%.0f', grant, now + leasettl))
    redis.call('PEXPIRE', lease, ttl)
  elseif held + covered > 0 then
    redis.call('HDEL', lease, id)
  end
  if member ~= '' then
    redis.call('SADD', keys[k], member)
    if redis.call('PTTL', keys[k]) < tonumber(ttl) then
      redis.call('PEXPIRE', keys[k], ttl)
    end
    k = k + 1
  end
  out[#out + 1] = count
  out[#out + 1] = grant
  out[#out + 1] = prev
  out[#out + 1] = math.max(excess, 0)
end
return out
