-- running.lua: the owners with handler calls under way on one shard, and
-- how many each, from the owner slots of WithOwnerConcurrency (see
-- slots.lua; Set.Running, Set.Groups). It only reads.
--
-- KEYS[1]  shard owner slots        expset:{name:S}:run
-- KEYS[2]  their owners and counts  expset:{name:S}:runo
-- KEYS[3]  shard event stream       expset:{name:S}:ev
-- ARGV[1]  consumer group, or "" for every group
-- ARGV[2]  offset: the live slots of the shard that earlier calls read (0
--          to start)
--
-- A slot is live while its lease end (its score in run) is now or later:
-- slot_lapse drops those that ended before now, and here they are skipped,
-- not dropped. A call reads at most MAX_BATCH live slots, of every group.
-- Reply: {the group is on the stream (0/1; 1 for ""), the next offset (-1:
-- done), then group, owner and calls for each owner with calls among the
-- slots read}.
local run, runo, stream, group = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local on = 1
if group ~= '' then
  on = 0
  if ARGV[2] == '0' and call('EXISTS', stream) == 1 then
    for _, x in ipairs(call('XINFO', 'GROUPS', stream)) do
      if info(x, 'name') == group then
        on = 1
      end
    end
  end
end
local offset = tonumber(ARGV[2])
local fields = call('ZRANGE', run, now_ms(''), '+inf', 'BYSCORE', 'LIMIT', offset, MAX_BATCH)
local more = -1
if #fields == MAX_BATCH then
  more = offset + MAX_BATCH
end
local out = {on, more}
local want, groups = {}, {}
for _, field in ipairs(fields) do
  local g = string.sub(field, string.find(field, ' ', 1, true) + 1)
  if group == '' or g == group then
    want[#want + 1] = field
    groups[#want] = g
  end
end
if #want == 0 then
  return out
end
local at = {}
for i, owner in ipairs(call('HMGET', runo, unpack(want))) do
  if owner then
    local g = groups[i]
    at[g] = at[g] or {}
    local j = at[g][owner]
    if j then
      out[j] = out[j] + 1
    else
      out[#out + 1] = g
      out[#out + 1] = owner
      out[#out + 1] = 1
      at[g][owner] = #out
    end
  end
end
return out
