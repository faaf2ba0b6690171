-- The script Throttle runs: a batch of requests, each decided by its
-- algorithm's function (the prelude and the algorithms come first).
-- ARGV[1]: the time in µs ("" = Redis TIME: the clock every replica shares;
-- only tests pass one). ARGV[2]: the requests, 28 bytes each, packed
-- little-endian: algorithm (1 fixed window, 2 sliding window, 3 token
-- bucket, 4 gcra), flags (1 indexed, 2 always count, 4 all or nothing,
-- 8 hold),
-- group (16 bits: the requests of one caller), limit, window µs or refill
-- rate, hits (doubles). ARGV[3]: "" when KEYS holds every request's state
-- key; else the number of requests, and the state keys follow in ARGV (on a
-- Redis Cluster, where only the first key is declared: a call may not
-- declare keys of several slots). Then the index members of the indexed
-- requests, in order, each followed, for a request that holds its hits
-- (hold.lua), by its hold's key, TTL in µs, keep in ms and its master's
-- index of holds: a hold is kept when its hits were within the limit and
-- stayed counted.
-- A group's all-or-nothing requests count only if all are within their
-- limits: at the first one over, what the group counted is undone and its
-- other all-or-nothing requests are decided without counting (an
-- always-counting request counts anyway).
-- Returns the time, then what each request's function appended.
-- batch is the function Redis calls (FCALL; or the script's last line
-- under EVALSHA), with the keys and arguments of the call.
local algs = {fixed_window, sliding_window, token_bucket, gcra}
local tb_fields, gcra_fields = {"t", "ts"}, {"t", "r"}

-- undo takes back the writes of a group's undo log, last first: a key the
-- group wrote twice gets back its state from before the group.
local function undo(ukey, ua, ub, uhash, n)
  for j = n, 1, -1 do
    if uhash[j] then
      if ua[j] then
        redis.call("HSET", ukey[j], uhash[j][1], ua[j], uhash[j][2], ub[j])
      else
        redis.call("DEL", ukey[j])
      end
    else
      uncount(ukey[j], ub[j], ua[j])
    end
  end
end

local function batch(KEYS, ARGV)
  out, nout, texts = {}, 1, {}
  local now
  if ARGV[1] == "" then
    local t = redis.call("TIME")
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  else
    now = tonumber(ARGV[1])
  end
  out[1] = now
  local blob = ARGV[2]
  local keys, k = KEYS, 0
  local m = 4
  if ARGV[3] ~= "" then
    keys, k = ARGV, 3
    m = 4 + tonumber(ARGV[3])
  end
  -- The undo log of the current group: key written, and its old state
  -- (a window counter's count before and the hits; a hash's two fields).
  local group, voided, nundo = -1, false, 0
  local ukey, ua, ub, uhash = {}, {}, {}, {}
  local pos, i = 1, 0
  local holds, gvoid = {}, {}
  while pos <= #blob do
    local alg, flags, g, limit, third, hits
    alg, flags, g, limit, third, hits, pos = struct.unpack("<BBHddd", blob, pos)
    i = i + 1
    if g ~= group then
      group, voided, nundo = g, false, 0
    end
    local key, member, index = keys[k + i], "", nil
    if flags % 2 == 1 then
      member = ARGV[m]
      m = m + 1
      index = string.sub(key, 1, #key - #member) .. "i"
    end
    local hold
    if flags >= 8 then
      hold = {ARGV[m], tonumber(ARGV[m + 1]), tonumber(ARGV[m + 2]), ARGV[m + 3]}
      m = m + 4
    end
    local always = flags % 4 >= 2
    local aon = flags % 8 >= 4
    local within, wk, a, b = algs[alg](key, index, member, now, limit, third, hits, always or not (aon and voided), always)
    if hold and within and wk then
      holds[#holds + 1] = {hold, g, aon and not always, alg, limit, third, hits, wk}
    end
    if aon then
      if not within and not voided then
        voided = true
        gvoid[g] = true
        undo(ukey, ua, ub, uhash, nundo)
        nundo = 0
      elseif wk and not always and not voided then
        nundo = nundo + 1
        ukey[nundo] = wk
        if alg <= 2 then
          -- b: what a refund took back (negative), else nil: the hits.
          ua[nundo], ub[nundo], uhash[nundo] = a, b or hits, false
        else
          ua[nundo], ub[nundo] = a, b
          uhash[nundo] = alg == 3 and tb_fields or gcra_fields
        end
      end
    end
  end
  for _, h in ipairs(holds) do
    if not (h[3] and gvoid[h[2]]) then
      local hd = h[1]
      keep_hold(hd[1], hd[2], hd[3], hd[4], h[4], h[5], h[6], h[7], h[8], now)
    end
  end
  return out
end
