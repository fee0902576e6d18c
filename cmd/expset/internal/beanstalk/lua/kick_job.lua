-- kick_job.lua: move one buried or delayed job to ready.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  job ID (padded)
-- ARGV[2]  wake-up channel, ARGV[3] tube name (published there)
--
-- Reply: 1 when kicked, 0 when the job is not buried or delayed.
tick()
local id = ARGV[1]
if call('ZREM', KEYS[4], id) + call('ZREM', KEYS[2], id) == 0 then
  return 0
end
local m = getmeta(id)
m[9] = m[9] + 1
setmeta(id, m)
makeready(id, m)
call('PUBLISH', ARGV[2], ARGV[3])
return 1
