-- extend.lua: push a live member's deadline to now+ttl (Set.Extend).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>
--          (KEYS[2], KEYS[3], the shard's index and stream, come with the
--          owner scripts' common key list; extending never needs them: a
--          later deadline keeps the index entry at or below the earliest
--          deadline. A set with no flags declares KEYS[1] only.)
-- ARGV[1]  ttl in ms (>= 1)
-- ARGV[2]  member
-- The common call (no flags, the server's clock) sends those two; #ARGV
-- says whether the rest follow:
-- ARGV[3]  flags (see prelude: e, p)
-- ARGV[4]  now in ms, or "" for the server's TIME
--
-- The deadline never moves earlier: it becomes max(current, now+ttl).
-- Reply: the deadline in ms (integer), or false when the member is absent
-- or expired.
local key, member, flags = KEYS[1], ARGV[2], ARGV[3]
local now
if flags and ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
local ttl = tonumber(ARGV[1])
local events = flags and string.find(flags, 'e', 1, true) ~= nil

local s = call('ZSCORE', key, member)
if not s or tonumber(s) <= now then
  return false
end
local old = tonumber(s)
local d = now + ttl
if d <= old then
  return old
end
call('ZADD', key, 'XX', string.format('%d', d), member)
-- The key's TTL reaches the end of old's bucket already (see TTL_BUCKET).
local b = math.floor(d / TTL_BUCKET)
if not events and b > math.floor(old / TTL_BUCKET) then
  call('PEXPIRE', key, string.format('%d', (b + 1) * TTL_BUCKET - now), 'GT')
end
if flags and string.find(flags, 'p', 1, true) then
  lib().stretch_payload(KEYS[4], ttl, events)
end
return d
