-- three-call.lua: the three-call semaphore recipe (as in job-queue rate
-- limiters): drop expired, count, add. The caller's clock, no key TTL, no
-- retry recognition, no retry-after: it does less than expset's Acquire.
--
-- KEYS[1]  the owner's sorted set (member -> deadline in Unix ms)
-- ARGV[1]  now in Unix ms (the caller's clock)
-- ARGV[2]  the new member's deadline in Unix ms
-- ARGV[3]  limit
-- ARGV[4]  member
--
-- Reply: 1 added, 0 denied.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
return 1
