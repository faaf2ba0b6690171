-- The script Throttle runs: a batch of requests, each decided by its
-- algorithm's function (the prelude and the algorithms come first).
-- ARGV[1]: the time in µs ("" = Redis TIME: the clock every replica shares;
-- only tests pass one); ARGV[2]: n, the number of requests.
-- KEYS: each request's state key and index key, in pairs. On a Redis
-- Cluster only the first key is declared, and all 2n follow in ARGV.
-- Then five ARGV per request: the algorithm's code, limit, window µs (token
-- bucket: refill rate), hits, index member.
-- Returns one {allowed 0|1, remaining, reset_us, retry_us, now_us} per request.
local algs = {fw = fixed_window, sw = sliding_window, tb = token_bucket, gcra = gcra}
local now
if ARGV[1] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local n = tonumber(ARGV[2])
local keys, base = KEYS, 2
if #KEYS < 2 * n then
  keys = {}
  for i = 1, 2 * n do
    keys[i] = ARGV[2 + i]
  end
  base = 2 + 2 * n
end
local out = {}
for i = 1, n do
  local a = base + (i - 1) * 5
  out[i] = algs[ARGV[a + 1]](keys[2 * i - 1], keys[2 * i], ARGV[a + 5], now,
    tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]))
end
return out
