-- bury.lua: move an expiry event that failed too often to the dead-letter
-- stream (Set.Consume).
--
-- KEYS[1]  shard event stream        expset:{name:S}:ev
-- KEYS[2]  shard dead-letter stream  expset:{name:S}:dead
-- ARGV[1]  consumer group
-- ARGV[2]  consumer that holds the entry
-- ARGV[3]  entry ID
-- ARGV[4]  attempts made
-- ARGV[5]  the last error's text
--
-- Only the consumer that holds the entry may bury it: when the visibility
-- timeout passed and another consumer claimed it, nothing changes. The dead
-- letter keeps the event's fields (o, m, d, p) and adds id (the entry's ID in
-- the event stream), g (group), c (consumer), a (attempts) and err.
-- Reply: 1 when buried, 0 when the entry is no longer this consumer's.
local stream, dead, group, consumer, id = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local p = call('XPENDING', stream, group, id, id, 1)
if p[1] == nil or p[1][2] ~= consumer then
  return 0
end
local e = call('XRANGE', stream, id, id)
if e[1] then
  local args = {}
  local f = e[1][2]
  for i = 1, #f do
    args[i] = f[i]
  end
  call('XADD', dead, '*', 'id', id, 'g', group, 'c', consumer, 'a', ARGV[4], 'err', ARGV[5], unpack(args))
end
call('XACK', stream, group, id)
call('XDEL', stream, id)
return 1
