-- forget_holds: Go puts it in front of reset.lua and clear.lua, which
-- call it for each state they delete. It marks the held holds of the
-- state's list of holds (hold.lua) R, cleared: their hits go with the
-- state, and a settle finds them cleared and counts nothing, so a hold
-- made before a reset never counts into the fresh counter nor brings it
-- back. A hold past its expiry that no sweep gave back yet is marked E,
-- expired, as a sweep would. Each leaves its master's index (index) and
-- the index's count of hits held; the list goes.
local function forget_holds(state, index, now)
  local list = state .. ":h"
  for _, hkey in ipairs(redis.call("ZRANGE", list, 0, -1)) do
    local rec = redis.call("GET", hkey)
    if rec and string.sub(rec, 1, 1) == "H" then
      local hits, exp = string.match(rec, "^%a|%d|[^|]+|[^|]+|([^|]+)|([^|]+)|")
      local st = "R"
      if tonumber(exp) <= now then st = "E" end
      redis.call("SET", hkey, st .. string.sub(rec, 2), "KEEPTTL")
      redis.call("ZREM", index, hkey)
      if redis.call("DECRBY", index .. ":n", hits) <= 0 then
        redis.call("DEL", index .. ":n")
      end
    end
  end
  redis.call("DEL", list)
end
