-- put.lua: put one job unless a job of its ID is waiting (Set.Put), or
-- move a waiting job's due time (Set.Reschedule).
--
-- KEYS[1]  the job's bucket       expset:{name:S}:o:\0job:<b>
-- KEYS[2]  shard due index        expset:{name:S}:due
-- KEYS[3]  the call's receipt     expset:{name:S}:r:#<token>
-- KEYS[4]  the bucket's payloads  expset:{name:S}:p:\0job:<b> (with ARGV[7])
-- ARGV[1]  delay in ms (0 to 100 years)
-- ARGV[2]  job ID (the member)
-- ARGV[3]  the bucket's owner name (its member in the due index)
-- ARGV[4]  now in ms, or "" for the server's TIME
-- ARGV[5]  how long the receipt lasts, in ms; 0: no receipt (the client
--          never sends a call again)
-- ARGV[6]  "n" to put (Set.Put), "x" to move (Set.Reschedule)
-- ARGV[7]  the payload to put (absent: none)
--
-- A job in its bucket, due or not, is waiting (the sweeper has not taken
-- it). With n, a waiting job is left as it is; else the job is added at
-- now + delay with its payload. With x, a waiting job is moved to now +
-- delay; else nothing is written. The bucket is then filed in the due
-- index at that deadline unless it is filed at or before it (ZADD LT: the
-- entry stays at or before the bucket's earliest job; a job moved later
-- leaves it early, and the sweeper re-files the bucket when it comes).
-- When that filing made the bucket the index's head (the shard's next
-- deadline moved earlier), the deadline is published on KEYS[2] ..
-- ':wake' (notify.go), so a job due at once is swept at once. Expired jobs
-- stay for the sweeper. No score is read on the common path: every
-- command there replies an integer.
--
-- The receipt records the write for a retry of the call (a client sends
-- a call whose reply it lost again, and the server may have run it): a
-- string key with a TTL, written first with NX (one command, no read
-- before it), holding the new deadline. A run that finds it returns that
-- deadline as written and writes nothing, also once the sweeper has taken
-- the job. A run that writes no job deletes it: a call that changes
-- nothing leaves nothing, and its retry looks again.
-- Reply, n: {deadline ms, 1} when put, {the waiting job's deadline ms, 0}
-- when not; x: the new deadline in ms, or false when no job waits.
local key, id, put = KEYS[1], ARGV[2], ARGV[6] == 'n'
local now
if ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
local d = now + tonumber(ARGV[1])
local ds = string.format('%d', d)
local receipt = ARGV[5] ~= '0'
if receipt then
  local first = call('SET', KEYS[3], ds, 'NX', 'PX', ARGV[5], 'GET')
  if first then
    if put then
      return {tonumber(first), 1}
    end
    return tonumber(first)
  end
end
if put then
  if call('ZADD', key, 'NX', ds, id) == 0 then
    if receipt then
      call('DEL', KEYS[3])
    end
    return {tonumber(call('ZSCORE', key, id)), 0}
  end
  if ARGV[7] then
    call('HSET', KEYS[4], id, ARGV[7])
  end
-- XX CH: 1 when moved; 0 when not there, or there at this deadline already.
elseif call('ZADD', key, 'XX', 'CH', ds, id) == 0 and not call('ZSCORE', key, id) then
  if receipt then
    call('DEL', KEYS[3])
  end
  return false
end
local owner = ARGV[3]
if call('ZADD', KEYS[2], 'LT', 'CH', ds, owner) == 1 and call('ZRANGE', KEYS[2], 0, 0)[1] == owner then
  lib().wake(KEYS[2], ds)
end
if put then
  return {d, 1}
end
return d
