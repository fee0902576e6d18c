-- bury.lua: bury a job reserved by the caller.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  job ID (padded)
-- ARGV[2]  token of the calling connection
-- ARGV[3]  new priority
--
-- Reply: 1 when buried, 0 when the caller does not hold the job.
tick()
local id = ARGV[1]
local m = unhold(id, ARGV[2])
if not m then
  return 0
end
m[1] = tonumber(ARGV[3])
m[8] = m[8] + 1
setmeta(id, m)
call('ZADD', KEYS[4], call('HINCRBY', KEYS[8], 'bseq', 1), id)
return 1
