-- Sliding window: the previous window's count, weighted by how much of it
-- still overlaps the window ending now, plus the current window's count:
--   used = prev * (window - elapsed) / window + count
-- A request is admitted when used + hits <= limit. A rejected request changes
-- nothing; hits = 0 only reads. The state is a hash {s = window start µs,
-- c = count, p = previous count}.
local function sliding_window(state, index, member, now, limit, window, hits)
  local start = now - (now % window)
  local count, prev = 0, 0
  local st = redis.call("HMGET", state, "s", "c", "p")
  local same = false
  if st[1] then
    local s = tonumber(st[1])
    same = s == start
    if same then
      count, prev = tonumber(st[2]) or 0, tonumber(st[3]) or 0
    elseif s == start - window then
      prev = tonumber(st[2]) or 0
    end
  end

  local elapsed = now - start
  local used = prev * (window - elapsed) / window + count
  local reset = window - elapsed
  local allowed = used + hits <= limit
  local retry = 0
  if allowed and hits > 0 then
    count = count + hits
    used = used + hits
    redis.call("HSET", state, "s", start, "c", count, "p", prev)
    if not same then
      -- The count matters until the next window ends. Within the window the
      -- TTLs are already right.
      keep(state, index, member, math.ceil((start + 2 * window - now) / 1000), true)
    end
  end
  if not allowed then
    if hits > limit then
      retry = reset
    elseif count + hits <= limit then
      retry = math.ceil((window - elapsed) - (limit - hits - count) * window / prev)
    else
      retry = (window - elapsed) + math.ceil(window - (limit - hits) * window / count)
    end
  end
  local remaining = math.floor(limit - used)
  if remaining < 0 then remaining = 0 end
  return {allowed and 1 or 0, remaining, reset, retry, now}
end
