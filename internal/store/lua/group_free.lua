-- group_free.lua: free the call slots of a capped group
-- (WithGroupConcurrency) whose calls ended, or that no call was begun with.
--
-- KEYS[1]  the group's call slots  expset:{name}:gslots:<group>  (see
--          group_take.lua)
-- ARGV[1]  the cap
-- ARGV[2..] tokens (at most 1000)
--
-- When a slot is freed of a group that was at its cap, "g" is published on
-- KEYS[1] .. ':wake' (SPUBLISH, or PUBLISH where the server lacks it), so
-- that consumers waiting for a slot (notify.go) try again at once.
-- Reply: how many slots were freed (integer).
local key = KEYS[1]
local before = call('ZCARD', key)
local n = call('ZREM', key, unpack(ARGV, 2))
if n > 0 and before >= tonumber(ARGV[1]) then
  local ch = key .. ':wake'
  local r = redis.pcall('SPUBLISH', ch, 'g')
  if type(r) == 'table' and r.err then
    call('PUBLISH', ch, 'g')
  end
end
return n
