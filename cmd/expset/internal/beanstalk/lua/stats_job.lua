-- stats_job.lua: a job's state and counters.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  job ID (padded)
--
-- Reply: {state, pri, ttr, delay, created (ms), reserves, timeouts, releases,
-- buries, kicks, deadline (ms; 0 unless reserved or delayed), now (ms)}, or
-- false when the job is not there.
tick()
local id = ARGV[1]
local m = getmeta(id)
if not m then
  return false
end
local state, deadline = 'ready', 0
local r = call('ZSCORE', KEYS[3], id)
local d = call('ZSCORE', KEYS[2], id)
if r then
  state, deadline = 'reserved', tonumber(r)
elseif d then
  state, deadline = 'delayed', tonumber(d)
elseif call('ZSCORE', KEYS[4], id) then
  state = 'buried'
end
return {state, m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], deadline, now}
