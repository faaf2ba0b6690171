-- GCRA, the generic cell rate algorithm: the state is a theoretical arrival
-- time TAT; each hit costs the emission interval T = window / limit. A
-- request is admitted when max(TAT, now) + hits * T - now <= window, and then
-- moves TAT there (always: moves it anyway, further ahead than a window). A
-- missing key (or TAT <= now) is idle: limit hits at once.
-- Exact in integers: with g = gcd(limit, window), a µs is p = limit / g units
-- and T is c = window / g units; TAT is t + r / p µs. Every number stays
-- below 2^53 (Limit.Validate refuses limits where limit * c would not; an
-- always-counting limit's debt stops there).
-- The state is a hash {t = TAT µs, r = remainder in units, 0 <= r < p}.
-- Appends 1 (within) or 0, then t and r as stored (false when missing).
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

local max_exact = 9007199254740991

local function gcra(state, index, member, now, limit, window, hits, write, always)
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
    if ahead > window and not always then
      -- Only if the clock went back: as far ahead as TAT may be.
      level = capacity
    elseif ahead >= 0 then
      level = math.min(ahead * p + (tonumber(st[2]) or 0), always and max_exact or capacity)
    end
  end
  local within = hits < 0 or (hits <= limit and hits * c <= capacity - level)
  put(within and 1 or 0)
  put(st[1])
  put(st[2])
  if hits == 0 or not write or not (within or always) or (hits < 0 and not st[1]) then
    return within
  end
  if hits < 0 then
    -- A refund: TAT back by up to -hits intervals, never before now.
    level = level - math.min(level, math.min(-hits, math.floor(max_exact / c)) * c)
  else
    level = math.min(level + hits * c, max_exact)
  end
  local ahead, rem = divmod(level, p)
  redis.call("HSET", state, "t", itoa(now + ahead), "r", itoa(rem))
  -- The key lives until TAT: after that a missing key means the same.
  local reset = ahead
  if rem > 0 then reset = reset + 1 end
  keep(state, index, member, math.ceil(math.max(reset, 1000) / 1000), not st[1])
  return within, state, st[1], st[2]
end
