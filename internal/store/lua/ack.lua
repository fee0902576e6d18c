-- ack.lua: acknowledge expiry events a group has finished with: handled, or
-- not meant for it (Set.Consume, Reservation.Finish).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard owner slots     expset:{name:S}:runo  (with a cap only;
--          see groups.lua)
-- ARGV[1]  consumer group
-- ARGV[2..] pairs (at most 1000): an entry ID, and the token of the handler
--          call that handled it ("" for an entry not meant for the group,
--          which no call began)
--
-- An entry is acknowledged only while its attempts field carries the
-- call's token: a call whose lease lapsed and whose event another call
-- has begun since (or that was dead-lettered meanwhile) acknowledges
-- nothing. The entries acknowledged leave the group's pending list, their
-- attempts are cleared and their owner slots freed; each is deleted from
-- the stream once no group still needs it (see forget in groups.lua), so
-- with one group a handled event goes at once.
-- Reply: one item per pair, in order: 1 when acknowledged, 0 when the call
-- no longer held it.
local stream, att, group = KEYS[1], KEYS[2], ARGV[1]
RUNO = KEYS[3]
-- slots is made on first use: the calls of a consumer without an owner cap
-- hold none.
-- The attempts fields are read with one HMGET.
local all = {}
for i = 2, #ARGV - 1, 2 do
  all[#all + 1] = att_field(ARGV[i], group)
end
local vals = call('HMGET', att, unpack(all))
local ids, fields, slots, out = {}, {}, nil, {}
for i = 2, #ARGV - 1, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  local field = all[i / 2]
  local mine, slot = tok == '', nil
  if not mine then
    local t
    t, slot = att_token(vals[i / 2])
    mine = t == tok
  end
  if mine then
    ids[#ids + 1] = id
    fields[#fields + 1] = field
    if slot then
      if slots then
        slots[#slots + 1] = slot
      else
        slots = {slot}
      end
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if #ids == 0 then
  return out
end
local n = call('XACK', stream, group, unpack(ids))
call('HDEL', att, unpack(fields))
if slots then
  local firsts = {}
  for _, sl in ipairs(slots) do
    slot_free(sl, false, firsts)
  end
  if firsts[1] then
    call('HDEL', RUNO, unpack(firsts))
  end
end
if n > 0 then
  -- (None pending: acknowledged before, and forgotten then, or the stream
  -- is gone, deleted with its events.)
  forget(stream, ids, group)
end
return out
