-- claim.lua: take over expiry events left pending longer than the visibility
-- timeout, with their delivery counts (Set.Consume).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- ARGV[1]  consumer group
-- ARGV[2]  consumer that takes them
-- ARGV[3]  visibility timeout in ms (XAUTOCLAIM's min-idle-time)
-- ARGV[4]  cursor: the ID to scan the pending list from ("0-0" to start)
-- ARGV[5]  the most entries to claim
--
-- XAUTOCLAIM does not return delivery counts; XPENDING's extended form does,
-- read here in the same call. XAUTOCLAIM counts the claim as a delivery, so
-- each count is the attempt number of this delivery.
-- Reply: {cursor, {id, deliveries, {field, value, ...}}...} where cursor is
-- where the next call starts ("0-0" once the whole list was scanned). Entries
-- deleted from the stream while pending are acknowledged and left out.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local r = call('XAUTOCLAIM', stream, group, consumer, ARGV[3], ARGV[4], 'COUNT', ARGV[5])
local out = {r[1]}
for _, e in ipairs(r[2]) do
  if e[2] then
    local p = call('XPENDING', stream, group, e[1], e[1], 1)
    local n = 1
    if p[1] then
      n = p[1][4]
    end
    out[#out + 1] = {e[1], n, e[2]}
  else
    call('XACK', stream, group, e[1])
  end
end
return out
