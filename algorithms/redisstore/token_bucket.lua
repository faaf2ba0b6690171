-- Token bucket: capacity limit, refilled continuously at rate tokens per
-- second. A request takes hits tokens and is admitted when they are there
-- (always: taken anyway, so tokens may go below zero). A missing key is a
-- full bucket. The state is a hash {t = tokens, ts = µs of t}. Appends 1
-- (within) or 0, then t and ts as stored (false when missing).
local function token_bucket(state, index, member, now, limit, rate, hits, write, always)
  local st = redis.call("HMGET", state, "t", "ts")
  local tokens = limit
  if st[1] then
    local elapsed = now - tonumber(st[2])
    if elapsed < 0 then elapsed = 0 end
    tokens = math.min(limit, tonumber(st[1]) + elapsed * rate / 1e6)
  end
  local within = tokens >= hits
  put(within and 1 or 0)
  put(st[1])
  put(st[2])
  if hits == 0 or not write or not (within or always) or (hits < 0 and not st[1]) then
    return within
  end
  -- A refund (hits < 0) gives tokens back, never past full.
  tokens = math.min(limit, tokens - hits)
  -- %.17g keeps every bit of the double, so the next call reads back exactly.
  redis.call("HSET", state, "t", string.format("%.17g", tokens), "ts", itoa(now))
  keep(state, index, member, math.ceil(math.max(math.ceil((limit - tokens) / rate * 1e6), 1000) / 1000), not st[1])
  return within, state, st[1], st[2]
end
