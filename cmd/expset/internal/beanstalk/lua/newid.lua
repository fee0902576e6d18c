-- newid.lua: a new job ID, and which tube holds it.
--
-- KEYS[1]  ID counter          string  (the queue's own hash tag)
-- KEYS[2]  job ID -> tube      hash
-- KEYS[3]  tubes ever used     set
-- ARGV[1]  tube name
--
-- Reply: the new job ID (integer), one more than the last over the queue's
-- life.
local id = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], id, ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
return id
