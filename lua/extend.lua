-- extend.lua: push a live member's deadline to now+ttl (Set.Extend).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>
--          (KEYS[2], KEYS[3], the shard's index and stream, come with the
--          owner scripts' common key list; extending never needs them: a
--          later deadline keeps the index entry at or below the earliest
--          deadline. A set with no flags declares KEYS[1] only.)
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  ttl in ms (>= 1)
-- ARGV[3]  member
-- ARGV[4]  flags (see prelude: e, p)
--
-- The deadline never moves earlier: it becomes max(current, now+ttl).
-- Reply: the deadline in ms (integer), or false when the member is absent
-- or expired.
local key, member, flags = KEYS[1], ARGV[3], ARGV[4]
local now = now_ms(ARGV[1])
local ttl = tonumber(ARGV[2])
local events = has(flags, 'e')

local s = call('ZSCORE', key, member)
if not s or tonumber(s) <= now then
  return false
end
local d = now + ttl
if d <= tonumber(s) then
  return tonumber(s)
end
call('ZADD', key, 'XX', d, member)
keep_ttl(key, ttl, false, events)
if has(flags, 'p') then
  lib().stretch_payload(KEYS[4], ttl, events)
end
return d
