-- prune.lua: remove consumers that hold nothing from a consumer group
-- (Set.Consume).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- ARGV[1]  consumer group
-- ARGV[2]  idle time in ms: consumers with nothing pending idle at least this
--          long are removed ("" removes none by idle time)
-- ARGV[3]  a consumer to remove now if it has nothing pending (the caller,
--          as it stops), or ""
--
-- XGROUP DELCONSUMER drops a consumer's pending entries for good, so only
-- consumers with nothing pending are removed, checked in the same step. A
-- live consumer removed while idle comes back at its next read, so an idle
-- time the server does not know (-1, on some emulators) counts as long
-- enough.
-- Reply: how many consumers were removed (integer).
local stream, group = KEYS[1], ARGV[1]
if call('EXISTS', stream) == 0 then
  return 0 -- deleted: no group, no consumers (XINFO would fail)
end
local idle = tonumber(ARGV[2])
local n = 0
for _, c in ipairs(call('XINFO', 'CONSUMERS', stream, group)) do
  local name = info(c, 'name')
  local i = tonumber(info(c, 'idle'))
  if tonumber(info(c, 'pending')) == 0 and (name == ARGV[3] or (idle and (i >= idle or i < 0))) then
    call('XGROUP', 'DELCONSUMER', stream, group, name)
    n = n + 1
  end
end
return n
