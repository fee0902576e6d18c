-- delete.lua: delete a job: ready, delayed, buried, or reserved by the caller.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  job ID (padded)
-- ARGV[2]  token of the calling connection
--
-- Reply: 1 when deleted, 0 when not there or reserved by another connection.
tick()
local id = ARGV[1]
if call('ZSCORE', KEYS[3], id) then
  if call('HGET', KEYS[7], id) ~= ARGV[2] then
    return 0
  end
  call('ZREM', KEYS[3], id)
elseif call('ZREM', KEYS[1], id) + call('ZREM', KEYS[2], id) + call('ZREM', KEYS[4], id) == 0 then
  return 0
end
call('HDEL', KEYS[5], id)
call('HDEL', KEYS[6], id)
call('HDEL', KEYS[7], id)
call('HINCRBY', KEYS[8], 'deletes', 1)
return 1
