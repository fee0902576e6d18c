-- group_renew.lua: extend the leases of a capped group's call slots
-- (WithGroupConcurrency) while their calls run, beside renew.lua's
-- renewal of their events.
--
-- KEYS[1]  the group's call slots  expset:{name}:gslots:<group>  (see
--          group_take.lua)
-- ARGV[1]  the lease TTL in ms
-- ARGV[2..] the tokens of the calls under way (at most 1000)
--
-- A slot still there is the call's: only group_take.lua removes a lapsed
-- slot, as it takes slots, so one lapsed and not yet removed was counted
-- by no one and is renewed as it stands. A slot gone was freed or given to
-- another call after it lapsed: the call runs without one, and its
-- consumer ends it as a lost lease.
-- Reply: one item per token, in order: 1 when renewed, 0 when gone.
local key = KEYS[1]
local t = call('TIME')
local ends = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
local held = call('ZMSCORE', key, unpack(ARGV, 2))
local out, add = {}, {}
for i = 1, #held do
  if held[i] then
    out[i] = 1
    add[#add + 1] = ends
    add[#add + 1] = ARGV[i + 1]
  else
    out[i] = 0
  end
end
if #add > 0 then
  call('ZADD', key, 'XX', unpack(add))
end
return out
