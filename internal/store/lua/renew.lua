-- renew.lua: extend the leases of handler calls under way, or of events
-- Reserve handed out (Set.Consume's lease keeper, Reservation.Touch).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard owner slots    expset:{name:S}:runo  (with a cap only;
--          see groups.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  consumer
-- ARGV[3]  lease TTL in ms
-- ARGV[4..] pairs (at most 1000): an entry ID, and the token of the call
--          whose lease it is
--
-- The lease of a call is the entry's idle time in the group's pending list:
-- XCLAIM ... JUSTID to this consumer sets it to 0 (and leaves the delivery
-- count alone), and no consumer claims an entry idle less than the lease
-- TTL. A lease is the call's while the entry's attempts field carries the
-- call's token: no begin has started another call of it since, and it was
-- not acknowledged, retried or dead-lettered. A consumer that claimed the
-- entry meanwhile (its lease had lapsed) and has not begun it loses it
-- back here: its begin then finds the entry held by another.
-- Reply: one item per pair, in order: 1 when renewed, 0 when the lease is
-- no longer the call's.
local stream, att, group, consumer = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
RUNO = KEYS[3]
-- The attempts fields are read with one HMGET.
local fields = {}
for i = 4, #ARGV - 1, 2 do
  fields[#fields + 1] = att_field(ARGV[i], group)
end
local vals = call('HMGET', att, unpack(fields))
local out = {}
for i = 4, #ARGV - 1, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  local token = att_token(vals[i / 2 - 1])
  local r = 0
  if token == tok and hold(stream, att, group, consumer, id) then
    r = 1
  end
  out[#out + 1] = r
end
return out
