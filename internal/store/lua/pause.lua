-- pause.lua: pause or resume a consumer group, or one owner in it, on one
-- shard (Set.Pause, Set.Resume: a group on every shard, an owner on its
-- own).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev  (its wake-up channel
--          is KEYS[1] .. ':wake')
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- ARGV[1]  "p" pause or "r" resume
-- ARGV[2]  consumer group
-- ARGV[3]  owner, or "" for the whole group
--
-- The attempts hash holds, beside the events' fields (which start with an
-- entry ID's digits), per group: "P:<group>", what begins.lua reads once a
-- call: "g" while the group is paused, else the number of owners paused in
-- it on this shard, absent when neither; "G:<group>", "1" while the group
-- is paused; "Q:<group>", the owners paused; and
-- "O:<len(group)>:<group><owner>" for each owner paused. A resume that
-- changed something publishes "s" on the shard's event wake-up channel
-- (SPUBLISH, or PUBLISH where the server lacks it), so that consumers
-- holding events set aside try them again at once.
-- Reply: 1 when the state changed, 0 when it already was so.
local att, group, owner = KEYS[2], ARGV[2], ARGV[3]
local pause = ARGV[1] == 'p'
local changed
if owner == '' then
  if pause then
    changed = call('HSETNX', att, 'G:' .. group, '1')
  else
    changed = call('HDEL', att, 'G:' .. group)
  end
else
  local f = 'O:' .. #group .. ':' .. group .. owner
  if pause then
    changed = call('HSETNX', att, f, '1')
  else
    changed = call('HDEL', att, f)
  end
  if changed == 1 then
    local n = 1
    if not pause then
      n = -1
    end
    if call('HINCRBY', att, 'Q:' .. group, n) <= 0 then
      call('HDEL', att, 'Q:' .. group)
    end
  end
end
if changed == 0 then
  return 0
end
local p = 'P:' .. group
if call('HEXISTS', att, 'G:' .. group) == 1 then
  call('HSET', att, p, 'g')
else
  local q = call('HGET', att, 'Q:' .. group)
  if q then
    call('HSET', att, p, q)
  else
    call('HDEL', att, p)
  end
end
if not pause then
  local ch = KEYS[1] .. ':wake'
  local r = redis.pcall('SPUBLISH', ch, 's')
  if type(r) == 'table' and r.err then
    call('PUBLISH', ch, 's')
  end
end
return 1
