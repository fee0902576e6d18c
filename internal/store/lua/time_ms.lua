-- time_ms.lua: time_ms, the server's TIME in ms as a decimal string, for
-- the scripts that write a job's event at once (put_now, reschedule_now).
-- Shared code, not a script: scripts.go places it after prelude.lua.

-- time_ms returns TIME's seconds and the first digits of its microseconds
-- (which TIME gives without leading zeros) joined as strings: no number is
-- parsed or formatted (2.4k instructions less a call than string.format
-- of the product; bench/README.md).
local function time_ms()
  local t = call('TIME')
  local us = t[2]
  local n = #us -- 1 to 6 digits
  if n == 6 then
    return t[1] .. string.sub(us, 1, 3)
  elseif n == 5 then
    return t[1] .. '0' .. string.sub(us, 1, 2)
  elseif n == 4 then
    return t[1] .. '00' .. string.sub(us, 1, 1)
  end
  return t[1] .. '000'
end
