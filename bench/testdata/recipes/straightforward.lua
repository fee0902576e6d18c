-- straightforward.lua: the check-then-add a user writes first, with the
-- same guarantees a caller needs from expset's Acquire on the common paths:
-- the server's clock, expired members dropped, a retry recognised, a cap,
-- and a key that expires with its latest deadline.
--
-- KEYS[1]  the owner's sorted set (member -> deadline in Unix ms)
-- ARGV[1]  limit
-- ARGV[2]  ttl in ms
-- ARGV[3]  member
--
-- Reply: 2 already held, 1 added, 0 denied.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  return 2
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
local d = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], d, ARGV[3])
redis.call('PEXPIREAT', KEYS[1], d)
return 1
