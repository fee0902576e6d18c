-- reschedule.lua: move a waiting job's due time (Set.Reschedule).
--
-- KEYS[1]  the job's owner key    expset:{name:S}:o:<owner>, or its
--          bucket's (o:\0job:<b>); its owner name starts at the position
--          #KEYS[2], as in put.lua
-- KEYS[2]  shard due index        expset:{name:S}:due
-- KEYS[3]  the call's receipt     expset:{name:S}:r:#<token>
-- ARGV[1]  delay in ms (0 to 100 years)
-- ARGV[2]  job ID (the member)
-- ARGV[3]  how long the receipt lasts, in ms; 0: no receipt
-- ARGV[4]  now in ms (absent: the server's TIME)
--
-- A job in its owner's set, due or not, is waiting: it is moved to now +
-- delay, and the owner filed in the due index as put.lua files it (a job
-- moved later leaves the entry early, and the sweeper re-files the owner when it
-- comes), with the same wake-up. A job not waiting is not written. The
-- receipt is put.lua's.
-- Reply: the new deadline in ms, or false when no job waits.
local K, A = KEYS, ARGV
local key, due, id, rms = K[1], K[2], A[2], A[3]
local now
if A[4] then
  now = tonumber(A[4])
else
  local t = call('TIME')
  local us = t[2] + 0
  now = t[1] * 1000 + (us - us % 1000) / 1000
end
local d = now + A[1]
local ds = string.format('%d', d)
if rms ~= '0' then
  local first = call('SET', K[3], ds, 'NX', 'PX', rms, 'GET')
  if first then
    return tonumber(first)
  end
end
-- XX CH: 1 when moved; 0 when not there, or there at this deadline already.
if call('ZADD', key, 'XX', 'CH', ds, id) == 0 and not call('ZSCORE', key, id) then
  if rms ~= '0' then
    call('DEL', K[3])
  end
  return false
end
local owner = string.sub(key, #due)
if call('ZADD', due, 'LT', 'CH', ds, owner) == 1 and call('ZRANK', due, owner) == 0 then
  local ch = due .. ':wake'
  local ok = redis.pcall('SPUBLISH', ch, ds)
  if type(ok) == 'table' and ok.err then
    call('PUBLISH', ch, ds)
  end
end
return d
