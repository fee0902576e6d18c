-- pause.lua: pause a tube: no job is reserved from it for a while.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  how long (s; 0 unpauses it, as in beanstalkd 1.12)
-- ARGV[2]  wake-up channel, ARGV[3] tube name (published there)
--
-- Reply: 1.
call('HSET', KEYS[8], 'pause', ARGV[1], 'unpause', string.format('%.0f', now + tonumber(ARGV[1]) * 1000))
call('HINCRBY', KEYS[8], 'pausects', 1)
call('PUBLISH', ARGV[2], ARGV[3])
return 1
