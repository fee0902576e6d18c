-- wait_renew.lua: the keep-alive of one process's waiters on one owner
-- (Quota.AcquireWait); helpers in wait_gate.lua.
--
-- KEYS[1]  owner's ticket leases  expset:{name:S}:wl:<owner>
-- KEYS[2]  owner's wait line      expset:{name:S}:w:<owner>
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  lease in ms
-- ARGV[3..] tickets still waiting in this process (at most 1000)
--
-- Pushes each ticket's lease to now+lease, drops dead tickets (and tells
-- the new head when the head was one of them), and keeps both keys alive.
-- Reply: {head, lost...}: the head's ticket ("" when the line is empty),
-- then the tickets given that are no longer in the line (their lease
-- lapsed, or they were admitted meanwhile).
local leases, line = KEYS[1], KEYS[2]
local now = now_ms(ARGV[1])
local lease = tonumber(ARGV[2])
local W = waitlib()
if W.purge(line, leases, now) then
  W.wake_head(line)
end
local ids = {}
for i = 3, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
local out = {''}
if #ids > 0 then
  local s = call('ZMSCORE', leases, unpack(ids))
  local renew = {}
  for i = 1, #ids do
    if s[i] then
      renew[#renew + 1] = now + lease
      renew[#renew + 1] = ids[i]
    else
      out[#out + 1] = ids[i]
    end
  end
  if #renew > 0 then
    call('ZADD', leases, 'XX', unpack(renew))
  end
end
local h = call('ZRANGE', line, '0', '0')[1]
if h then
  out[1] = h
  call('PEXPIRE', line, ARGV[2])
  call('PEXPIRE', leases, ARGV[2])
end
return out
