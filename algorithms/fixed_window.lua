-- Fixed window: at most limit hits per window of window µs, windows
-- aligned to the Unix epoch. A rejected request changes nothing; hits = 0
-- only reads. The state is a hash {s = window start µs, c = count}.
local function fixed_window(state, index, member, now, limit, window, hits)
  local start = now - (now % window)
  local count = 0
  local st = redis.call("HMGET", state, "s", "c")
  local same = st[1] and tonumber(st[1]) == start
  if same then
    count = tonumber(st[2]) or 0
  end

  local reset = start + window - now
  local allowed = count + hits <= limit
  local retry = 0
  if allowed and hits > 0 then
    count = count + hits
    redis.call("HSET", state, "s", start, "c", count)
    if not same then
      -- A new window: the key expires when it ends. Within the window the
      -- TTLs are already right.
      keep(state, index, member, math.ceil(reset / 1000), true)
    end
  end
  if not allowed then
    retry = reset
  end
  local remaining = limit - count
  if remaining < 0 then remaining = 0 end
  return {allowed and 1 or 0, remaining, reset, retry, now}
end
