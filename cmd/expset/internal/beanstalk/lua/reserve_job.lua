-- reserve_job.lua: reserve a job by ID, from ready, delayed or buried.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  job ID (padded)
-- ARGV[2]  token of the reserving connection
--
-- Reply: {1, id, ttr, body}, or false when the job is not there or already
-- reserved.
tick()
local id = ARGV[1]
if call('ZREM', KEYS[1], id) + call('ZREM', KEYS[2], id) + call('ZREM', KEYS[4], id) == 0 then
  return false
end
return take(id, ARGV[2])
