-- begin.lua: start a handler call of an expiry event, or extend the lease of
-- one under way (Set.Consume).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard owner slots     expset:{name:S}:run   (WithOwnerConcurrency,
--          mode t only; see slots.lua: a capped call begins in take.lua or
--          begins.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  consumer
-- ARGV[3]  entry ID
-- ARGV[4]  mode: "b" begins a handler call, "t" extends the lease of one
-- ARGV[5]  visibility timeout in ms (modes b and t)
-- ARGV[6]  attempts allowed, WithMaxAttempts (mode b)
-- ARGV[7]  idle time in ms under which this consumer's own lease is kept as
--          it is (mode b; a sixth of the visibility timeout)
-- ARGV[8]  the call's token (mode b): unique to the handler call, so that a
--          begin run twice (a client's retry after a timeout) counts once
--
-- The lease of a handler call is the entry's idle time in the group's
-- pending list: XCLAIM ... JUSTID to this consumer sets it to 0 (and leaves
-- the delivery count alone), and no consumer claims an entry idle less than
-- the visibility timeout.
-- Mode b: the entry must be pending in the group, held by this consumer or
-- idle for at least the visibility timeout (then nobody else may take it
-- now), with attempts left. Its attempts go up by one (unless the last
-- call begun carried this call's token: then this is that begin again, and
-- its attempt number is returned as it was), and it is taken
-- unless this consumer took it less than ARGV[7] ms ago (read or claimed it
-- just now): then that lease runs on, renewed before it can lapse, and the
-- XCLAIM, a lookup of the entry in the stream, is saved.
-- Mode t: the entry must be pending and held by this consumer; its idle time
-- goes back to 0, and its owner slot's lease end moves on.
-- Reply: mode b, {the attempt number of the call (1 for the first), 1 when
-- taken now or 0 when the lease taken ARGV[7] ms ago at most runs on}; mode
-- t, 1. 0 when the conditions do not hold (another consumer holds the
-- event, it was acknowledged, or retention trimmed it: see hold in
-- groups.lua); -1 (mode b) when every attempt is used.
local stream, att, group, consumer, id = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local holder, idle = pending_of(stream, group, id)
if ARGV[4] == 't' then
  if holder ~= consumer then
    return 0
  end
  if KEYS[3] then
    slot_renew(KEYS[3], att_field(id, group), tonumber(ARGV[5]))
  end
  if not hold(stream, att, group, consumer, id) then
    return 0
  end
  return 1
end
if not holder or (holder ~= consumer and idle < tonumber(ARGV[5])) then
  return 0
end
local field = att_field(id, group)
local used, token = att_get(att, field)
if token == ARGV[8] and holder == consumer then
  return {used, 1}
end
if used >= tonumber(ARGV[6]) then
  return -1
end
local taken = 0
if holder ~= consumer or idle >= tonumber(ARGV[7]) then
  if not hold(stream, att, group, consumer, id) then
    return 0
  end
  taken = 1
end
call('HSET', att, field, string.format('%d', used + 1) .. ' ' .. ARGV[8])
return {used + 1, taken}
