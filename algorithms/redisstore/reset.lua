-- Reset: delete the state keys an identifier's index lists, all of them or
-- only those of one algorithm, and return how many limits' states existed.
-- A window algorithm's member ends in "@<window µs>": its state is a
-- counter per window, and the live ones are the current window's and the
-- one before.
-- The holds of each state deleted are marked cleared (forget.lua).
-- KEYS[1] the identifier's index set
-- ARGV: key prefix of the identifier ("throttle:{…}:"), algorithm code ("" = all),
-- the time in µs ("" = Redis TIME; only tests pass one), the master's
-- index of holds (holds.go)
local members = redis.call("SMEMBERS", KEYS[1])
local prefix, code = ARGV[1], ARGV[2]
local now
if ARGV[3] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[3])
end
local deleted = 0
for _, m in ipairs(members) do
  if code == "" or string.sub(m, 1, #code + 1) == code .. ":" then
    local window = tonumber(string.match(m, "@(%d+)$"))
    local n
    forget_holds(prefix .. m, ARGV[4], now)
    if window then
      local num = (now - now % window) / window
      local cur, prev = prefix .. m .. ":" .. num, prefix .. m .. ":" .. (num - 1)
      n = redis.call("DEL", cur, prev)
      redis.call("DEL", cur .. ":l", prev .. ":l") -- an approximate limit's leases
    else
      n = redis.call("DEL", prefix .. m)
    end
    if n > 0 then
      deleted = deleted + 1
    end
    redis.call("SREM", KEYS[1], m)
  end
end
if redis.call("SCARD", KEYS[1]) == 0 then
  redis.call("DEL", KEYS[1])
end
return deleted
