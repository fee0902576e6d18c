-- job-take.lua: the bare recipe's drain, beside job-put.lua: take up to
-- ARGV[1] due jobs with their payloads, removing them (at most once: a
-- worker that dies with them loses them; no consumer groups, no leases, no
-- retries).
--
-- KEYS[1]  the jobs' sorted set (ID -> due time in ms)
-- KEYS[2]  the payloads' hash (ID -> payload)
-- ARGV[1]  the most jobs to take
-- Reply: {id, payload, id, payload, ...}, empty when none is due.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ids = redis.call('ZRANGE', KEYS[1], '-inf', string.format('%d', now), 'BYSCORE', 'LIMIT', 0, ARGV[1])
if #ids == 0 then
  return {}
end
local ps = redis.call('HMGET', KEYS[2], unpack(ids))
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
local out = {}
for i, id in ipairs(ids) do
  out[2 * i - 1] = id
  out[2 * i] = ps[i]
end
return out
