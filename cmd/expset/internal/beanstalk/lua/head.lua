-- head.lua: the most urgent ready job of a tube, for a reserve over several
-- tubes (it reserves nothing).
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
--
-- Reply: {1, id, priority} or, when the tube is paused or has no ready job,
-- {0, ms until the tube next changes by itself, -1 for never}.
tick()
if paused() then
  return {0, nextevent()}
end
local h = call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if not h[1] then
  return {0, nextevent()}
end
return {1, h[1], tonumber(h[2])}
