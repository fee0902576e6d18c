-- put_one.lua: a new job ID and the job, in one script, for a single Redis
-- server (on a cluster the counter and the tube are on different slots, and
-- newid.lua then put.lua do it in two).
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- KEYS[9]  ID counter          string
-- KEYS[10] job ID -> tube      hash
-- KEYS[11] tubes ever used     set
-- ARGV[1]  priority (0 .. 2^32-1)
-- ARGV[2]  delay (s)
-- ARGV[3]  time to run (s, at least 1)
-- ARGV[4]  body
-- ARGV[5]  wake-up channel, ARGV[6] tube name
--
-- Reply: the new job ID (integer), one more than the last over the queue's
-- life.
local id = call('INCR', KEYS[9])
call('HSET', KEYS[10], id, ARGV[6])
call('SADD', KEYS[11], ARGV[6])
local digits = string.format('%.0f', id)
store(string.rep('0', 20 - #digits) .. digits, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
return id
