-- running.lua: the owners with handler calls under way on one shard that
-- hold an owner slot (WithOwnerConcurrency), and how many each, from the
-- shard's slot counts (see groups.lua; Set.Running, Set.Groups). It only
-- reads.
--
-- KEYS[1]  shard slot counts   expset:{name:S}:runo
-- KEYS[2]  shard event stream  expset:{name:S}:ev
-- ARGV[1]  consumer group, or "" for every group
-- ARGV[2]  cursor: where the scan of the counts resumes ("0" to start)
--
-- A call reads about MAX_BATCH counts (HSCAN), of every group.
-- Reply: {the group is on the stream (0/1; 1 for ""), the next cursor ("0":
-- done), then group, owner and calls for each owner with calls among the
-- counts read}.
local runo, stream, group = KEYS[1], KEYS[2], ARGV[1]
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
local r = call('HSCAN', runo, ARGV[2], 'COUNT', MAX_BATCH)
local out = {on, r[1]}
local kv = r[2]
for i = 1, #kv - 1, 2 do
  -- The field is "<len(group)>:<group><owner>" (slot_field).
  local f = kv[i]
  local colon = string.find(f, ':', 1, true)
  local n = colon and tonumber(string.sub(f, 1, colon - 1))
  local g = n and string.sub(f, colon + 1, colon + n)
  local calls = tonumber(kv[i + 1])
  if g and (group == '' or g == group) and calls and calls > 0 then
    out[#out + 1] = g
    out[#out + 1] = string.sub(f, colon + n + 1)
    out[#out + 1] = calls
  end
end
return out
