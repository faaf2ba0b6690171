-- Fixed window: at most limit hits per window of window µs, windows
-- aligned to the Unix epoch. Each window is a plain counter, key
-- "<state>:<window number>" (start / window), which expires when its window
-- ends. Appends the count before the request: c when within the limit, -c-1
-- when over. A refund (hits < 0) returns, when it wrote, the hits it took
-- back as a fourth value, for the undo log.
local function fixed_window(state, index, member, now, limit, window, hits, write, always)
  local start = now - now % window
  local key = window_key(state, start / window)
  local ttl = math.ceil((start + window - now) / 1000)
  if hits < 0 then
    local before, back = refund(key, hits, write)
    put(before)
    if back then return true, key, before, back end
    return true
  end
  local before, wrote = count(key, hits, write, hits <= limit, always, ttl)
  local within = before + hits <= limit
  if within then put(before) else put(-before - 1) end
  if not wrote then
    return within
  end
  if within or always then
    index_state(index, member, ttl, before == 0)
    return within, key, before
  end
  uncount(key, hits, before)
  return within
end
