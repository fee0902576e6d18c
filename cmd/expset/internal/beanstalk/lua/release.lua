-- release.lua: put a job reserved by the caller back, ready or delayed.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  job ID (padded)
-- ARGV[2]  token of the calling connection
-- ARGV[3]  new priority
-- ARGV[4]  delay (s)
-- ARGV[5]  '1': a release command (counted, priority and delay set);
--          '0': the connection closed (nothing counted, it goes back ready)
-- ARGV[6]  wake-up channel, ARGV[7] tube name (published there)
--
-- Reply: 1 when released, 0 when the caller does not hold the job.
tick()
local id = ARGV[1]
local m = unhold(id, ARGV[2])
if not m then
  return 0
end
local delay = 0
if ARGV[5] == '1' then
  m[1] = tonumber(ARGV[3])
  delay = tonumber(ARGV[4])
  m[3] = delay
  m[7] = m[7] + 1
  setmeta(id, m)
end
if delay > 0 then
  call('ZADD', KEYS[2], now + delay * 1000, id)
else
  makeready(id, m)
end
call('PUBLISH', ARGV[6], ARGV[7])
return 1
