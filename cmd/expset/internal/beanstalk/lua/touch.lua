-- touch.lua: restart the time to run of a job reserved by the caller.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  job ID (padded)
-- ARGV[2]  token of the calling connection
--
-- Reply: the job's time to run (s, at least 1), or 0 when the caller does
-- not hold the job.
tick()
local id = ARGV[1]
if not owned(id, ARGV[2]) then
  return 0
end
local m = getmeta(id)
call('ZADD', KEYS[3], now + m[2] * 1000, id)
return m[2]
