-- Holds (reservations; see hold.go): Go puts this after the algorithms,
-- which it reuses, and before batch.lua, which keeps holds (keep_hold). A hold is a string key "<state>:h:<id>", in its
-- counter's slot, holding
--   <status>|<alg>|<limit>|<window µs or refill rate>|<hits>|<expiry µs>|<counted key>
-- status H (held), S (settled), E (expired: given back) or R (its state was
-- reset or cleared while it was held: forget.lua); the counted key
-- is the window counter or bucket its hits were counted in. It lives until
-- its expiry plus its keep (algorithms.HoldKeep), a tombstone once settled.
-- Each held hold is also in an index of its master, a sorted set scored by
-- expiry (the index's ":n" counts the hits held), which sweep reads, and in
-- its state's list "<state>:h" (a sorted set by expiry, in the counter's
-- slot), which held sums and a reset or clear of the state marks cleared
-- (forget.lua).

local hold_algs = {fixed_window, sliding_window, token_bucket, gcra}

-- quiet calls an algorithm's function and drops what it appended to out.
local function quiet(f, ...)
  local n = nout
  f(...)
  for j = n + 1, nout do out[j] = nil end
  nout = n
end

-- adjust counts delta more hits (negative: fewer) in the key a hold was
-- counted in, at now: a window's count never below 0 (nothing when the
-- window is gone); a bucket never past full, a GCRA's TAT never before now;
-- more than held counted as always-counting hits are.
local function adjust(alg, key, limit, third, delta, now)
  if delta == 0 then return end
  if alg <= 2 then
    local c = tonumber(redis.call("GET", key))
    if not c then return end
    if delta > 0 then
      redis.call("INCRBY", key, itoa(delta))
    elseif c > 0 then
      redis.call("DECRBY", key, itoa(math.min(c, -delta)))
    end
    return
  end
  quiet(hold_algs[alg], key, nil, "", now, limit, third, delta, true, true)
end

local function parse_hold(rec)
  local st, alg, limit, third, hits, exp, key = string.match(rec, "^(%a)|(%d)|([^|]+)|([^|]+)|([^|]+)|([^|]+)|(.*)$")
  return st, tonumber(alg), tonumber(limit), tonumber(third), tonumber(hits), tonumber(exp), key
end

-- hold_list is the list of holds of a hold's state: its key without the
-- id (an id is escaped: it has no ':').
local function hold_list(hkey)
  return string.match(hkey, "^(.*):[^:]*$")
end

-- keep_hold records a hold of hits counted in ckey at now.
local function keep_hold(hkey, ttl, keep, index, alg, limit, third, hits, ckey, now)
  local exp = now + ttl
  redis.call("SET", hkey, "H|" .. alg .. "|" .. itoa(limit) .. "|" .. string.format("%.17g", third) .. "|" ..
    itoa(hits) .. "|" .. itoa(exp) .. "|" .. ckey, "PX", itoa(math.ceil(ttl / 1000) + keep))
  redis.call("ZADD", index, itoa(exp), hkey)
  redis.call("INCRBY", index .. ":n", itoa(hits))
  local list = hold_list(hkey)
  redis.call("ZADD", list, itoa(exp), hkey)
  local live = math.ceil(ttl / 1000) + 1000
  if redis.call("PTTL", list) < live then redis.call("PEXPIRE", list, itoa(live)) end
end

-- give_back gives a held hold's hits back and marks it status.
local function give_back(hkey, rec, index, status, delta, now)
  local _, alg, limit, third, hits, _, ckey = parse_hold(rec)
  adjust(alg, ckey, limit, third, delta - hits, now)
  redis.call("SET", hkey, status .. string.sub(rec, 2), "KEEPTTL")
  redis.call("ZREM", index, hkey)
  redis.call("ZREM", hold_list(hkey), hkey)
  if redis.call("DECRBY", index .. ":n", itoa(hits)) <= 0 then
    redis.call("DEL", index .. ":n")
  end
  return hits
end

local function time_arg(arg)
  if arg == "" then
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return tonumber(arg)
end

-- settle: ARGV[1] the time ("" = Redis TIME); ARGV[2] per settle, packed
-- little-endian: algorithm, flags (1 cancel; 2 void: a cancel that leaves
-- no record, for a hold of a group another master voided), limit, window µs or refill
-- rate, hits committed (doubles); ARGV[3] "" when KEYS holds the keys, else
-- their number, and they follow in ARGV. Three keys per settle: its state
-- key, its hold, its master's index. Returns the time, then per settle its
-- outcome (1 settled, 2 already settled, 3 expired, 4 unknown, 5 cleared) and, when
-- settled, what it held and what a read of its state finds (as batch).
local function settle(KEYS, ARGV)
  out, nout, texts = {}, 1, {}
  local now = time_arg(ARGV[1])
  out[1] = now
  local keys, k = KEYS, 0
  if ARGV[3] ~= "" then keys, k = ARGV, 3 end
  local blob, pos = ARGV[2], 1
  while pos <= #blob do
    local alg, flags, limit, third, hits
    alg, flags, limit, third, hits, pos = struct.unpack("<BBddd", blob, pos)
    local state, hkey, index = keys[k + 1], keys[k + 2], keys[k + 3]
    k = k + 3
    local rec = redis.call("GET", hkey)
    local st, _, _, _, held, exp = "", 0, 0, 0, 0, 0
    if rec then st, _, _, _, held, exp = parse_hold(rec) end
    if not rec then
      put(4)
    elseif st == "S" then
      put(2)
    elseif st == "E" then
      put(3)
    elseif st == "R" then
      put(5)
    elseif exp <= now then
      give_back(hkey, rec, index, "E", 0, now)
      put(3)
    else
      if flags % 2 == 1 then hits = 0 end
      give_back(hkey, rec, index, "S", hits, now)
      if flags >= 2 then redis.call("DEL", hkey) end
      put(1)
      put(held)
      hold_algs[alg](state, nil, "", now, limit, third, 0, false, false)
    end
  end
  return out
end

-- sweep gives back the holds of the indexes (ARGV[4..], or KEYS) that
-- expired by now, at most ARGV[2] per index. ARGV[1] the time ("" = Redis
-- TIME); ARGV[3] "" when KEYS holds the indexes, else their number. A hold
-- the master no longer serves (its slot moved) is dropped from the index.
-- Returns how many it gave back, and the hits still held in the indexes.
local function sweep(KEYS, ARGV)
  out, nout, texts = {}, 0, {}
  local now = time_arg(ARGV[1])
  local keys, k, n = KEYS, 0, #KEYS
  if ARGV[3] ~= "" then keys, k, n = ARGV, 3, tonumber(ARGV[3]) end
  local expired, held = 0, 0
  for i = 1, n do
    local index = keys[k + i]
    local due = redis.call("ZRANGEBYSCORE", index, "-inf", itoa(now), "LIMIT", "0", ARGV[2])
    for _, hkey in ipairs(due) do
      local rec = redis.pcall("GET", hkey)
      if type(rec) == "string" and string.sub(rec, 1, 1) == "H" then
        give_back(hkey, rec, index, "E", 0, now)
        expired = expired + 1
      else
        redis.call("ZREM", index, hkey)
      end
    end
    held = held + (tonumber(redis.call("GET", index .. ":n")) or 0)
  end
  return {expired, held}
end

-- held sums, for each state, the hits of its unexpired held holds counted
-- in its current window (window algorithms) or its bucket, from its list
-- of holds: a hold past its expiry is not summed even before a sweep gave
-- it back. ARGV[1] the time ("" = Redis TIME); ARGV[2] per state, packed
-- little-endian: algorithm, window µs (a double; 0 for the buckets);
-- ARGV[3] "" when KEYS holds the state keys, else their number, and they
-- follow in ARGV. Returns the sums, in order.
local function held(KEYS, ARGV)
  out, nout, texts = {}, 0, {}
  local now = time_arg(ARGV[1])
  local keys, k = KEYS, 0
  if ARGV[3] ~= "" then keys, k = ARGV, 3 end
  local sums, blob, pos, i = {}, ARGV[2], 1, 0
  while pos <= #blob do
    local alg, window
    alg, window, pos = struct.unpack("<Bd", blob, pos)
    i = i + 1
    local state = keys[k + i]
    local cur = state
    if alg <= 2 then cur = window_key(state, (now - now % window) / window) end
    local sum = 0
    for _, hkey in ipairs(redis.call("ZRANGEBYSCORE", state .. ":h", "(" .. itoa(now), "+inf")) do
      local rec = redis.call("GET", hkey)
      if rec then
        local st, _, _, _, hits, exp, ckey = parse_hold(rec)
        if st == "H" and exp > now and ckey == cur then sum = sum + hits end
      end
    end
    sums[i] = sum
  end
  return sums
end
