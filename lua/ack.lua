-- ack.lua: acknowledge expiry events a group has finished with: handled, or
-- not meant for it (Set.Consume).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard owner slots     expset:{name:S}:run   (WithOwnerConcurrency
-- KEYS[4]  their owners          expset:{name:S}:runo   only: their slots go)
-- ARGV[1]  consumer group
-- ARGV[2..] entry IDs (at most 1000)
--
-- The entries leave the group's pending list and their attempts are
-- cleared; each is deleted from the stream once no group still needs it
-- (see forget in groups.lua), so with one group a handled event goes at once.
-- Reply: how many entries were still pending (integer); 0 means another
-- consumer acknowledged them first.
local stream, att, group = KEYS[1], KEYS[2], ARGV[1]
local ids, fields = {}, {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
  fields[#fields + 1] = att_field(ARGV[i], group)
end
local n = call('XACK', stream, group, unpack(ids))
call('HDEL', att, unpack(fields))
if KEYS[3] then
  for _, f in ipairs(fields) do
    slot_drop(KEYS[3], KEYS[4], f, group)
  end
end
if n > 0 then
  -- (None pending: acknowledged before, and forgotten then, or the stream
  -- is gone, deleted with its events.)
  forget(stream, ids, group)
end
return n
