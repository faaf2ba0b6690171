-- Sliding window: the previous window's count, weighted by how much of it
-- still overlaps the window ending now, plus the current window's count:
--   used = prev * (window - elapsed) / window + count
-- A request is admitted when used + hits <= limit. Each window is a plain
-- counter, key "<state>:<window number>", kept until the next window ends.
-- Appends the current window's count before the request (c within the
-- limit, -c-1 over), then the previous window's count.
local function sliding_window(state, index, member, now, limit, window, hits, write, always)
  local start = now - now % window
  local num = start / window
  local key = window_key(state, num)
  local prev = tonumber(redis.call("GET", window_key(state, num - 1))) or 0
  local elapsed = now - start
  local weighted = prev * (window - elapsed) / window
  local ttl = math.ceil((start + 2 * window - now) / 1000)
  if hits < 0 then
    local before, back = refund(key, hits, write)
    put(before)
    put(prev)
    if back then return true, key, before, back end
    return true
  end
  local before, wrote = count(key, hits, write, weighted + hits <= limit, always, ttl)
  local within = weighted + before + hits <= limit
  if within then put(before) else put(-before - 1) end
  put(prev)
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
