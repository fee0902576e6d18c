-- claim.lua: take over expiry events left pending longer than the
-- lease TTL, and bury those whose every attempt was used
-- (Set.Consume).
--
-- KEYS[1]  shard event stream        expset:{name:S}:ev
-- KEYS[2]  shard dead-letter stream  expset:{name:S}:dead
-- KEYS[3]  shard attempts hash       expset:{name:S}:att
-- KEYS[4]  shard owner slots          expset:{name:S}:runo  (see groups.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  consumer that takes them
-- ARGV[3]  lease TTL in ms (XAUTOCLAIM's min-idle-time)
-- ARGV[4]  cursor: the ID to scan the pending list from ("0-0" to start)
-- ARGV[5]  the most entries to claim
-- ARGV[6]  attempts allowed, WithMaxAttempts
-- ARGV[7]  the reason a buried entry's dead letter gives
--
-- An entry idle that long has no handler call under way: a live handler
-- call's lease keeps its idle time under the lease TTL. Attempts
-- come from the attempts hash (handler calls begun), not from delivery
-- counts, which reads and claims raise. An entry with every attempt used is
-- buried here, in the same step that found it idle: its last handler call
-- never finished (the consumer died, or lost Redis for longer than the
-- lease TTL). An entry whose retry delay has not ended (its
-- attempts field keeps a time not reached: see retry.lua) is held again by
-- RETRY_HOLDER and left out. The owner slot the last call held goes: its
-- lease has lapsed.
-- Reply: {cursor, {id, attempts used, buried (0/1), {field, value, ...}}...}
-- where cursor is where the next call starts ("0-0" once the whole list was
-- scanned). Entries deleted from the stream while pending are acknowledged
-- and left out. Error: NOGROUP when the stream or the group is missing.
local stream, dead, att, group, consumer = KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]
RUNO = KEYS[4]
local max = tonumber(ARGV[6])
-- A missing stream or group (the stream was deleted) is returned as
-- XAUTOCLAIM's own error reply, NOGROUP first on every server, so that Go
-- matches it by its code.
local r = redis.pcall('XAUTOCLAIM', stream, group, consumer, ARGV[3], ARGV[4], 'COUNT', ARGV[5])
if r.err then
  return redis.error_reply(r.err)
end
local out = {r[1]}
local now
for _, e in ipairs(r[2]) do
  local field = att_field(e[1], group)
  if e[2] then
    local used, tok, not_before, slot = att_get(att, field)
    local buried, waits = 0, false
    if used >= max then
      bury(stream, dead, att, group, consumer, e[1], e[2], used, ARGV[7])
      buried = 1
    elseif slot then
      slot_free(slot)
      call('HSET', att, field, string.format('%d', used) .. ' ' .. tok)
    elseif not_before then
      now = now or now_ms('')
      if not_before > now then
        -- Its retry delay runs on (retry.lua): held again, claimable when
        -- it ends or after another lease TTL, whichever is first.
        hold(stream, att, group, RETRY_HOLDER, e[1], math.max(tonumber(ARGV[3]) - (not_before - now), 0))
        waits = true
      end
    end
    if not waits then
      out[#out + 1] = {e[1], used, buried, e[2]}
    end
  else
    call('XACK', stream, group, e[1])
    att_clear(att, e[1], group)
  end
end
for _, id in ipairs(r[3] or {}) do
  att_clear(att, id, group)
end
return out
