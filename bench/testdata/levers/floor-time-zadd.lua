-- floor-time-zadd.lua: the least a server-clock admission script can do,
-- as a floor for the levers: read TIME, add the member, reply with one
-- integer. No check, no key TTL.
--
-- KEYS[1]  owner sorted set
-- ARGV[1]  ttl in ms
-- ARGV[2]  member
-- ARGV[3]  limit (unused)
local t = redis.call('TIME')
local d = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], string.format('%d', d), ARGV[2])
return d * 256 + 4 + 1
