-- bury.lua: move an expiry event whose handler call failed to the
-- dead-letter stream (Set.Consume).
--
-- KEYS[1]  shard event stream        expset:{name:S}:ev
-- KEYS[2]  shard dead-letter stream  expset:{name:S}:dead
-- KEYS[3]  shard attempts hash       expset:{name:S}:att
-- KEYS[4]  shard owner slots          expset:{name:S}:runo  (its slot goes with
--          its attempts field; see groups.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  consumer that holds the entry
-- ARGV[3]  entry ID
-- ARGV[4]  attempts the entry must have used: WithMaxAttempts (0 for an
--          entry that cannot be read as an event)
-- ARGV[5]  the last error's text
-- ARGV[6]  the token of the handler call that failed, or "" for an entry
--          that cannot be read as an event (no call began it)
--
-- Only the call's own lease is buried: the entry's attempts field must
-- carry its token (no other call of it has begun since, and it was not
-- acknowledged); an entry without a call must be pending and held by this
-- consumer. It must also have every attempt used: else nothing changes. An entry retention trimmed from the stream meanwhile is
-- only acknowledged, with its attempts cleared. The dead letter keeps the event's fields (o, m, d, p, r) and
-- adds id, g, c, a and err (see bury in groups.lua).
-- Reply: 1 when buried, 0 when not.
local stream, dead, att, group, consumer, id = KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3]
RUNO = KEYS[4]
local field = att_field(id, group)
local used, token = att_get(att, field)
if ARGV[6] == '' then
  if pending_of(stream, group, id) ~= consumer then
    return 0
  end
elseif token ~= ARGV[6] then
  return 0
end
if used < tonumber(ARGV[4]) then
  return 0
end
local e = call('XRANGE', stream, id, id)[1]
if not e then
  -- Retention trimmed it (and counted it): nothing left to bury.
  call('XACK', stream, group, id)
  att_clear(att, id, group)
  return 0
end
bury(stream, dead, att, group, consumer, id, e[2], used, ARGV[5])
return 1
