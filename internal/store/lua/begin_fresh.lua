-- begin_fresh.lua: begins.lua's most common call, alone: every item fresh
-- (a new event this consumer read so lately that nobody else can have
-- taken it and no call of it has begun; see begins.lua's ARGV[7]) and no
-- owner cap. Set.Consume and Set.Reserve send it instead of begins.lua
-- when both hold.
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- ARGV[1]  consumer group
-- ARGV[2..] pairs (at most 1000): an entry ID and the token of its call
--
-- While the group, or any owner in it, is paused (the attempts hash's
-- field "P:<group>" exists: pause.lua), it changes nothing and replies -1:
-- begins.lua then runs the call, with the owners it needs. Else each
-- item's call is begun as begins.lua begins a fresh one: its attempts
-- field becomes "1 <token>", and the lease the read took runs on. A field
-- there already is this begin sent again (the same value), or the mark
-- Set.Cancel leaves when it acknowledges a job's event read and not begun:
-- then, unless the entry is still pending, the entry is gone, the field
-- goes and nothing begins.
--
-- The script calls no shared function (groups.lua defines seven, each a
-- closure built on every run) and is sent seven values fewer than
-- begins.lua, plus one per item (bench/README.md has the numbers).
-- Reply: -1 (paused: nothing changed), else one integer per item, 4 for a
-- call begun (begins.lua's reply: attempt 1, the lease not taken now) or 0
-- for an entry gone: the integer itself for one item, else a table.
local K, A = KEYS, ARGV
local stream, att, group = K[1], K[2], A[1]
if call('HGET', att, 'P:' .. group) then
  return -1
end
local sfx = ' ' .. group
-- (One item's reply is its integer: a table costs its building and its
-- conversion.)
local out, r = nil, 0
if #A > 3 then
  out = {}
end
for i = 2, #A - 1, 2 do
  local id = A[i]
  local f = id .. sfx
  r = 4
  if call('HSET', att, f, '1 ' .. A[i + 1]) == 0 and not call('XPENDING', stream, group, id, id, '1')[1] then
    call('HDEL', att, f)
    r = 0
  end
  if out then
    out[#out + 1] = r
  end
end
return out or r
