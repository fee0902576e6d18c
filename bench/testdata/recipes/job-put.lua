-- job-put.lua: the bare recipe of a delayed job with a payload, as one
-- would write it without expset: the server's clock, the job in one
-- sorted set of due times, its payload in a hash, put only when its ID is
-- not there. No due index, no wake-up, no bound on the sorted set's size,
-- no recognition of a retried call.
--
-- KEYS[1]  the jobs' sorted set (ID -> due time in ms)
-- KEYS[2]  the payloads' hash (ID -> payload)
-- ARGV[1]  delay in ms
-- ARGV[2]  job ID
-- ARGV[3]  payload
-- Reply: 1 when put, 0 when a job of that ID is there already.
local t = redis.call('TIME')
local due = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
if redis.call('ZADD', KEYS[1], 'NX', string.format('%d', due), ARGV[2]) == 0 then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
