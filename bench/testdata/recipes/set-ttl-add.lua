-- set-ttl-add.lua: a set whose members carry their own deadline, added
-- unless already there. No cap at all, the caller's clock, no key TTL.
--
-- KEYS[1]  the owner's sorted set (member -> deadline in Unix ms)
-- ARGV[1]  the new member's deadline in Unix ms
-- ARGV[2]  member
--
-- Reply: 1 added, 0 already there.
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
return 1
