-- Token bucket: capacity limit, refilled continuously at rate tokens per
-- second. A request takes hits tokens and is admitted when they are there.
-- A missing key is a full bucket. A rejected request changes nothing;
-- hits = 0 only reads. The state is a hash {t = tokens, ts = µs of t}.
local function token_bucket(state, index, member, now, limit, rate, hits)
  local tokens = limit
  local st = redis.call("HMGET", state, "t", "ts")
  if st[1] then
    local elapsed = now - tonumber(st[2])
    if elapsed < 0 then elapsed = 0 end
    tokens = math.min(limit, tonumber(st[1]) + elapsed * rate / 1e6)
  end

  local allowed = tokens >= hits
  local wrote = false
  if allowed and hits > 0 then
    tokens = tokens - hits
    wrote = true
  end
  local reset = math.ceil((limit - tokens) / rate * 1e6)
  local retry = 0
  if wrote then
    -- %.17g keeps every bit of the double, so the next call reads back exactly.
    redis.call("HSET", state, "t", string.format("%.17g", tokens), "ts", now)
    keep(state, index, member, math.ceil(math.max(reset, 1000) / 1000), not st[1])
  end
  if not allowed then
    if hits > limit then
      retry = reset
    else
      retry = math.ceil((hits - tokens) / rate * 1e6)
    end
  end
  return {allowed and 1 or 0, math.floor(tokens), reset, retry, now}
end
