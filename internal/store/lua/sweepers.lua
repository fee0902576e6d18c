-- sweepers.lua: the set's sweeper registry (Sweeper): join or renew, leave,
-- or read it.
--
-- KEYS[1]  the registry  expset:{name}:sweepers  zset: token -> lease end
--          (Unix ms, the server's TIME)
-- ARGV[1]  the caller's token ("" to read only)
-- ARGV[2]  the lease TTL in ms: the caller's lease ends this long from now
--          (joined or renewed); "0" leaves (removes the caller's entry); ""
--          reads only
--
-- Every entry whose lease has ended is left out of the reply, and removed
-- unless the call only reads. The server's TIME
-- serves, not WithClock's: leases are about real time between processes.
--
-- Reply: {now, joined, token1, end1, token2, end2, ...}
--   now      the server's TIME in ms
--   joined   1 when the caller's entry was not there (a first join, or a
--            renewal after its lease ended or was removed), else 0
--   token, end  every live sweeper and the end of its lease, in ms, earliest
--            end first
local key, token, ttl = KEYS[1], ARGV[1], ARGV[2]
local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local joined = 0
if ttl == '0' then
  call('ZREM', key, token)
elseif ttl ~= '' then
  joined = call('ZADD', key, string.format('%d', now + tonumber(ttl)), token)
end
local all = call('ZRANGE', key, '0', '-1', 'WITHSCORES')
local reply, ended, n = {now, joined}, {}, 0
for i = 1, #all, 2 do
  local e = tonumber(all[i + 1])
  if e > now then
    reply[#reply + 1] = all[i]
    reply[#reply + 1] = e
  else
    n = n + 1
    ended[n] = all[i]
  end
end
if n > 0 and ttl ~= '' then
  call('ZREM', key, unpack(ended))
end
return reply
