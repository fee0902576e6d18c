-- retry.lua: schedule the next handler call of an expiry event whose call
-- failed, after a retry delay (Set.Consume).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard owner slots     expset:{name:S}:runo  (its slot goes; see
--          groups.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  consumer whose handler call failed
-- ARGV[3]  entry ID
-- ARGV[4]  the retry delay in ms (>= 0)
-- ARGV[5]  lease TTL in ms (the lease TTL): claim.lua takes entries
--          idle at least this long
-- ARGV[6]  the token of the call that failed
--
-- Only the call's own lease changes: the entry's attempts field must carry
-- its token (else another call of it has begun since, or it was
-- acknowledged or dead-lettered). It moves to RETRY_HOLDER, a
-- consumer that never reads, without counting a delivery (XCLAIM ... JUSTID):
-- - a delay shorter than the lease TTL becomes its idle time:
--   ARGV[5] - ARGV[4], so that any consumer's claim takes it ARGV[4] ms
--   from now;
-- - a longer one is kept in its attempts field as the time it may be
--   delivered again (not before; the server's TIME plus the delay), and its
--   idle time is 0: claim.lua finds it after the lease TTL and
--   holds it again, with the idle time that makes it claimable then.
-- A consumer that dies before this runs leaves the entry idle since its
-- last lease renewal: it comes back after the lease TTL at the latest.
-- Reply: 1 when scheduled, 0 when the lease is no longer the call's.
local stream, att, group, id = KEYS[1], KEYS[2], ARGV[1], ARGV[3]
local field = att_field(id, group)
RUNO = KEYS[3]
local used, token, _, slot = att_get(att, field)
if token ~= ARGV[6] then
  return 0
end
if slot then
  slot_free(slot)
  call('HSET', att, field, string.format('%d', used) .. ' ' .. token)
end
local delay, vis = tonumber(ARGV[4]), tonumber(ARGV[5])
if delay < vis then
  if not hold(stream, att, group, RETRY_HOLDER, id, vis - delay) then
    return 0
  end
  return 1
end
if not hold(stream, att, group, RETRY_HOLDER, id, 0) then
  return 0
end
call('HSET', att, field, string.format('%d', used) .. ' ' .. token .. ' ' .. string.format('%.0f', now_ms('') + delay))
return 1
