-- wait_leave.lua: a waiter gives up its place (Quota.AcquireWait whose
-- context ended); helpers in wait_gate.lua.
--
-- KEYS[1]  owner's ticket leases  expset:{name:S}:wl:<owner>
-- KEYS[2]  owner's wait line      expset:{name:S}:w:<owner>
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  ticket
--
-- Removes the ticket; when it was the head, drops dead tickets and tells
-- the new head, which may now be admitted.
-- Reply: 1 when the ticket was in the line, else 0.
local leases, line, ticket = KEYS[1], KEYS[2], ARGV[2]
local rank = call('ZRANK', line, ticket)
call('ZREM', leases, ticket)
if not rank then
  return 0
end
call('ZREM', line, ticket)
if rank == 0 then
  local W = waitlib()
  W.purge(line, leases, now_ms(ARGV[1]))
  W.wake_head(line)
end
return 1
