-- release.lua: hand events a consumer read but will not handle back for
-- prompt redelivery, as it stops (Set.Consume).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard owner slots     expset:{name:S}:runo  (see groups.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  consumer
-- ARGV[3]  idle time to give them in ms: the lease TTL, so that any
--          consumer's next claim takes them
-- ARGV[4]  an entry ID whose last attempt is given back (its handler call
--          failed because Consume was stopping, or its begin's reply was
--          lost), or ""
-- ARGV[5]  the token of that attempt's call: it is given back only if it
--          is still the last call begun, and only once (a release the client
--          sent twice refunds once)
-- ARGV[6..] entry IDs (at most 1000)
--
-- Only entries still pending and held by this consumer change: XCLAIM ...
-- IDLE JUSTID sets their idle time without counting a delivery. No attempt
-- is charged for them. Only the call given back (ARGV[4], while its token is
-- the last call's) frees an owner slot: the other entries began no call.
-- Reply: how many entries were released (integer).
local stream, att, group, consumer = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
RUNO = KEYS[3]
local n = 0
for i = 6, #ARGV do
  local id = ARGV[i]
  local holder = pending_of(stream, group, id)
  if not holder then
    -- Acknowledged: an attempts field left is a Set.Cancel's mark (see
    -- cancel.lua).
    call('HDEL', att, att_field(id, group))
  elseif holder == consumer and hold(stream, att, group, consumer, id, ARGV[3]) then
    if id == ARGV[4] then
      local field = att_field(id, group)
      local used, token, _, slot = att_get(att, field)
      if token == ARGV[5] then
        if slot then
          slot_free(slot)
        end
        if used <= 1 then
          call('HDEL', att, field)
        else
          call('HSET', att, field, string.format('%d', used - 1))
        end
      end
    end
    n = n + 1
  end
end
return n
