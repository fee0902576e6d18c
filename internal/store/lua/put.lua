-- put.lua: put one job unless a job of its ID is waiting (Set.Put), or
-- move a waiting job's due time (Set.Reschedule).
--
-- KEYS[1]  the job's bucket       expset:{name:S}:o:\0job:<b>; its owner
--          name (the due index's member) is the key's tail from its \0
-- KEYS[2]  shard due index        expset:{name:S}:due
-- KEYS[3]  the call's receipt     expset:{name:S}:r:#<token>
-- KEYS[4]  the bucket's payloads  expset:{name:S}:p:\0job:<b>, declared
--          only when a payload is put
-- ARGV[1]  delay in ms (0 to 100 years)
-- ARGV[2]  job ID (the member)
-- ARGV[3]  how long the receipt lasts, in ms; 0: no receipt (the client
--          never sends a call again)
-- ARGV[4]  "n" to put (Set.Put), "x" to move (Set.Reschedule)
-- #ARGV says whether the rest follow (WithClock sends ARGV[6]):
-- ARGV[5]  the payload to put, with KEYS[4] (else "" or absent)
-- ARGV[6]  now in ms (absent: the server's TIME)
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
-- Reply, n: one integer, 2 x deadline + 1 when put, 2 x the waiting job's
-- deadline when not (an integer costs less to reply than a table); x: the
-- new deadline in ms, or false when no job waits.
local key, id, put = KEYS[1], ARGV[2], ARGV[4] == 'n'
local now
if ARGV[6] then
  now = tonumber(ARGV[6])
else
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
local d = now + tonumber(ARGV[1])
local ds = string.format('%d', d)
local receipt = ARGV[3] ~= '0'
if receipt then
  local first = call('SET', KEYS[3], ds, 'NX', 'PX', ARGV[3], 'GET')
  if first then
    if put then
      return 2 * tonumber(first) + 1
    end
    return tonumber(first)
  end
end
if put then
  if call('ZADD', key, 'NX', ds, id) == 0 then
    if receipt then
      call('DEL', KEYS[3])
    end
    return 2 * tonumber(call('ZSCORE', key, id))
  end
  if KEYS[4] then
    call('HSET', KEYS[4], id, ARGV[5])
  end
-- XX CH: 1 when moved; 0 when not there, or there at this deadline already.
elseif call('ZADD', key, 'XX', 'CH', ds, id) == 0 and not call('ZSCORE', key, id) then
  if receipt then
    call('DEL', KEYS[3])
  end
  return false
end
local owner = string.sub(key, string.find(key, '\0', 1, true), -1)
if call('ZADD', KEYS[2], 'LT', 'CH', ds, owner) == 1 and call('ZRANGE', KEYS[2], 0, 0)[1] == owner then
  lib().wake(KEYS[2], ds)
end
if put then
  return 2 * d + 1
end
return d
