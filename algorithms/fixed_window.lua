-- Fixed window: at most limit hits per window of window_us microseconds,
-- windows aligned to the Unix epoch. A rejected request changes nothing;
-- hits = 0 only reads.
-- KEYS[1] state hash {s = window start µs, c = count}
-- KEYS[2] the identifier's index set (for Reset)
-- (prelude.lua comes first.)
-- ARGV: now_us ("" = Redis TIME), limit, window_us, hits, index member
-- Returns {allowed 0|1, remaining, reset_us, retry_us, now_us}
local now = clock()
local limit = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local hits = tonumber(ARGV[4])

local start = now - (now % window)
local count = 0
local st = redis.call("HMGET", KEYS[1], "s", "c")
local same = st[1] and tonumber(st[1]) == start
if same then
  count = tonumber(st[2]) or 0
end

local reset = start + window - now
local allowed = count + hits <= limit
local retry = 0
if allowed and hits > 0 then
  count = count + hits
  redis.call("HSET", KEYS[1], "s", start, "c", count)
  if not same then
    -- A new window: the key expires when it ends. Within the window the
    -- TTLs are already right.
    keep(math.ceil(reset / 1000), true)
  end
end
if not allowed then
  retry = reset
end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return {allowed and 1 or 0, remaining, reset, retry, now}
