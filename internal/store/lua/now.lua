-- now.lua: now_ms, the time of the scripts that take "now" as ARGV[1]
-- (count, deadline, members, payload, sweep, wait_renew, wait_leave).
-- Shared code, not a script: scripts.go places it after prelude.lua.

-- now_ms returns arg as a number of ms, or the server's TIME in ms when arg
-- is "".
local function now_ms(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  local t = call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
