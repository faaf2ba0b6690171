-- GCRA, the generic cell rate algorithm: the state is a theoretical arrival
-- time TAT; each hit costs the emission interval T = window / limit. A
-- request is admitted when max(TAT, now) + hits * T - now <= window, and then
-- moves TAT there. A missing key (or TAT <= now) is idle: limit hits at once.
-- A rejected request changes nothing; hits = 0 only reads.
-- Exact in integers: with g = gcd(limit, window), a µs is p = limit / g units
-- and T is c = window / g units; TAT is t + r / p µs. Every number stays
-- below 2^53 (Limit.Validate refuses limits where limit * c would not).
-- The state is a hash {t = TAT µs, r = remainder in units, 0 <= r < p}.
-- divmod returns floor(a / b) and a - b * floor(a / b), exactly for
-- 0 <= a < 2^53 and b > 0 (the division is correctly rounded; the checks
-- only make sure of it).
local function divmod(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q, r = q - 1, r + b
  elseif r >= b then
    q, r = q + 1, r - b
  end
  return q, r
end

-- ceildiv returns ceil(a / b), as divmod exactly.
local function ceildiv(a, b)
  local q, r = divmod(a, b)
  if r > 0 then q = q + 1 end
  return q
end

local function gcra(state, index, member, now, limit, window, hits)
  local g, b = limit, window
  while b > 0 do
    g, b = b, g % b
  end
  local p, c = limit / g, window / g
  local capacity = limit * c

  -- level: how far TAT lies ahead of now, in units (0 when TAT <= now).
  local level = 0
  local st = redis.call("HMGET", state, "t", "r")
  if st[1] then
    local ahead = tonumber(st[1]) - now
    if ahead > window then
      -- Only if the clock went back: as far ahead as TAT may be.
      level = capacity
    elseif ahead >= 0 then
      level = math.min(ahead * p + (tonumber(st[2]) or 0), capacity)
    end
  end

  local allowed = hits <= limit and hits * c <= capacity - level
  local wrote = false
  if allowed and hits > 0 then
    level = level + hits * c
    wrote = true
  end
  local reset = ceildiv(level, p)
  local retry = 0
  if wrote then
    local ahead, rem = divmod(level, p)
    redis.call("HSET", state, "t", now + ahead, "r", rem)
    -- The key lives until TAT: after that a missing key means the same.
    keep(state, index, member, math.ceil(math.max(reset, 1000) / 1000), not st[1])
  end
  if not allowed then
    if hits > limit then
      retry = reset
    else
      -- Until TAT has come close enough to now for hits more.
      retry = ceildiv(level - (limit - hits) * c, p)
    end
  end
  local remaining = divmod(capacity - level, c)
  return {allowed and 1 or 0, remaining, reset, retry, now}
end
