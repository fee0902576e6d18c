-- reserve.lua: reserve the most urgent ready job of a tube (or one named).
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  token of the reserving connection
-- ARGV[2]  job ID to reserve, if it is still ready ('' = the most urgent)
--
-- A paused tube gives nothing. Reply: {1, id, ttr, body} when reserved, else
-- {0, ms until the tube next changes by itself, -1 for never}.
tick()
if paused() then
  return {0, nextevent()}
end
local id = ARGV[2]
if id == '' then
  id = call('ZRANGE', KEYS[1], 0, 0)[1]
  if not id then
    return {0, nextevent()}
  end
elseif not call('ZSCORE', KEYS[1], id) then
  return {0, nextevent()}
end
call('ZREM', KEYS[1], id)
return take(id, ARGV[1])
