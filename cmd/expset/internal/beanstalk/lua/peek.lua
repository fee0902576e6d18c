-- peek.lua: a job's ID and body, without changing it.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  'id' (the job ARGV[2]), 'ready' (most urgent), 'delayed' (soonest
--          due) or 'buried' (first buried)
-- ARGV[2]  job ID (padded), for 'id'
--
-- Reply: {id, body}, or false when there is no such job.
tick()
local id
if ARGV[1] == 'id' then
  if call('HEXISTS', KEYS[5], ARGV[2]) == 1 then
    id = ARGV[2]
  end
else
  local from = ({ready = KEYS[1], delayed = KEYS[2], buried = KEYS[4]})[ARGV[1]]
  id = call('ZRANGE', from, 0, 0)[1]
end
if not id then
  return false
end
return {id, call('HGET', KEYS[6], id)}
