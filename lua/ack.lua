-- ack.lua: acknowledge and delete handled expiry events (Set.Consume).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- ARGV[1]  consumer group
-- ARGV[2..] entry IDs (at most 1000)
--
-- The entries leave the group's pending list and the stream in one step, so
-- the stream holds only events not yet handled.
-- Reply: how many entries were still pending (integer); 0 means another
-- consumer acknowledged them first.
local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
local n = call('XACK', KEYS[1], ARGV[1], unpack(ids))
call('XDEL', KEYS[1], unpack(ids))
return n
