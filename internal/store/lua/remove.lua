-- remove.lua: remove members of one owner (Set.Remove, Quota.Release).
-- Loaded after prelude.lua and wait_gate.lua.
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[2]  shard due index       expset:{name:S}:due
-- KEYS[3]  shard event stream    expset:{name:S}:ev
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>
--          (a set with no flags, see prelude, declares KEYS[1] only)
-- KEYS[#KEYS]  owner's wait line   expset:{name:S}:w:<owner> (always last)
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  owner
-- ARGV[3]  flags (see prelude: e, i, p)
-- ARGV[4..] members (at most 1000)
--
-- Only live members count as removed: expired ones are dropped first, with
-- their expiry events, because they expired before anyone removed them. When
-- the owner ends up empty its index entry goes too. With payloads, the call
-- takes the members in order while their payloads fit in what is left of
-- BYTES_MAX (at least one): the caller sends the rest again.
-- When a slot freed and someone waits for the owner, the head of its line
-- is told (wait_gate.lua).
-- Reply: {removed, taken}: the number of live members removed, and how many
-- of ARGV[4..] the call took (all of them, unless payloads filled it).
local key, owner, flags = KEYS[1], ARGV[2], ARGV[3]
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
local events, payloads, index = false, false, false
if flags ~= '' then
  local find = string.find
  events = find(flags, 'e', 1, true) ~= nil
  payloads = find(flags, 'p', 1, true) ~= nil
  index = find(flags, 'i', 1, true) ~= nil
end

local first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
if first[1] == nil then
  return {0, #ARGV - 3}
end
local more, used = false, 0
if tonumber(first[2]) <= now then
  local _
  _, more, _, _, used = lib().drop(key, KEYS[4], KEYS[3], owner, now, events, payloads, MAX_BATCH, false, BYTES_MAX)
end

local ids = {}
for i = 4, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
if payloads then
  local n = lib().fit(KEYS[4], owner, ids, #ids, false, true, BYTES_MAX - used)
  for i = #ids, n + 1, -1 do
    ids[i] = nil
  end
end
local taken = #ids
if more then
  -- Expired members beyond what one call drops stay for the sweeper and
  -- their events; remove only the live ones.
  local s = call('ZMSCORE', key, unpack(ids))
  local keep = {}
  for i = 1, #ids do
    if s[i] and tonumber(s[i]) > now then
      keep[#keep + 1] = ids[i]
    end
  end
  ids = keep
  if #ids == 0 then
    return {0, taken}
  end
end

local removed = call('ZREM', key, unpack(ids))
if removed > 0 then
  if payloads then
    call('HDEL', KEYS[4], unpack(ids))
  end
  if index and call('EXISTS', key) == 0 then
    call('ZREM', KEYS[2], owner)
  end
  if call('EXISTS', KEYS[#KEYS]) == 1 then
    waitlib().wake_head(KEYS[#KEYS])
  end
end
return {removed, taken}
