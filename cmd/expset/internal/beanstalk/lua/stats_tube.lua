-- stats_tube.lua: a tube's counts.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
--
-- Reply: {urgent (ready with priority < 1024), ready, reserved, delayed,
-- buried, total jobs put, deletes, pause-tube commands, pause (s; 0 when not
-- paused), pause left (ms), timeouts}.
tick()
local pause, left = 0, 0
if paused() then
  pause = tonumber(call('HGET', KEYS[8], 'pause'))
  left = tonumber(call('HGET', KEYS[8], 'unpause')) - now
end
local function n(f)
  return tonumber(call('HGET', KEYS[8], f) or '0')
end
return {call('ZCOUNT', KEYS[1], 0, 1023), call('ZCARD', KEYS[1]), call('ZCARD', KEYS[3]),
  call('ZCARD', KEYS[2]), call('ZCARD', KEYS[4]), n('total'), n('deletes'), n('pausects'),
  pause, left, n('timeouts')}
