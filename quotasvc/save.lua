-- save.lua keeps an allocation of one shared limit unless one for its epoch
-- or a later one is there already, and returns the one in force
-- (docs/rlqs.md).
-- KEYS[1]  the allocation: "epoch|fill|grants"
-- ARGV[1]  its epoch
-- ARGV[2]  the allocation
-- ARGV[3]  its TTL, ms
local cur = redis.call("GET", KEYS[1])
if cur then
  local e = tonumber(string.match(cur, "^(%d+)|"))
  if e and e >= tonumber(ARGV[1]) then
    return cur
  end
end
redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
return ARGV[2]
