-- put.lua: store a new job in a tube, ready or delayed.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  job ID (20-digit zero-padded)
-- ARGV[2]  priority (0 .. 2^32-1)
-- ARGV[3]  delay (s)
-- ARGV[4]  time to run (s, at least 1)
-- ARGV[5]  body
-- ARGV[6]  wake-up channel, ARGV[7] tube name (published there)
--
-- Reply: 1.
store(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
return 1
