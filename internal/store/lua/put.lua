-- put.lua: put one job unless a job of its ID is waiting (Set.Put).
--
-- KEYS[1]  the job's owner key    expset:{name:S}:o:<owner> (Set.Put
--          WithOwner), or its bucket's, expset:{name:S}:o:\0job:<b>; its
--          owner name (the due index's member) is the key's tail from the
--          position #KEYS[2] (the keys share their prefix; "o:" is one byte
--          shorter than "due")
-- KEYS[2]  shard due index        expset:{name:S}:due
-- KEYS[3]  the call's receipt     expset:{name:S}:r:#<token>
-- KEYS[4]  the owner's payloads   expset:{name:S}:p:<owner> (or
--          p:\0job:<b>), declared only when a payload is put
-- ARGV[1]  delay in ms (0 to 100 years)
-- ARGV[2]  job ID (the member)
-- ARGV[3]  how long the receipt lasts, in ms; 0: no receipt (the client
--          never sends a call again)
-- #ARGV says whether the rest follow (WithClock sends ARGV[5]):
-- ARGV[4]  the payload to put, with KEYS[4] (else "" or absent)
-- ARGV[5]  now in ms (absent: the server's TIME)
--
-- A job in its owner's set (a member of that ID), due or not, is waiting
-- (the sweeper has not taken it): it is left as it is. Else the job is added at now + delay with its
-- payload, and the owner is filed in the due index at that deadline
-- unless it is filed at or before it (ZADD LT: the entry stays at or
-- before the owner's earliest member). When that filing made the owner the
-- index's head (its ZRANK is 0: the shard's next deadline moved earlier;
-- the index is a skip list, IndexAnchor in Go, where a rank costs log n),
-- the deadline is published on KEYS[2] .. ':wake' (notify.go), so a job
-- due at once is swept at once. Expired jobs stay for the sweeper. No score is read on
-- the common path: every command there replies an integer.
--
-- The receipt records the write for a retry of the call (a client sends
-- a call whose reply it lost again, and the server may have run it): a
-- string key with a TTL, written first with NX (one command, no read
-- before it), holding the new deadline. A run that finds it returns that
-- deadline as written and writes nothing, also once the sweeper has taken
-- the job. A run that writes no job deletes it: a call that changes
-- nothing leaves nothing, and its retry looks again.
--
-- The script calls no shared function (it leaves lib.lua out: its wake-up
-- is written out here), converts TIME's microseconds once, reads KEYS and
-- ARGV through locals, and replies with the number it formatted: each of
-- these saves a few hundred instructions of a call of about 80k
-- (bench/README.md).
-- Reply: one integer, 2 x deadline + 1 when put, 2 x the waiting job's
-- deadline when not (an integer costs less to reply than a table).
local K, A = KEYS, ARGV
local key, due, id, rms = K[1], K[2], A[2], A[3]
local now
if A[5] then
  now = tonumber(A[5])
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
    return 2 * first + 1
  end
end
if call('ZADD', key, 'NX', ds, id) == 0 then
  if rms ~= '0' then
    call('DEL', K[3])
  end
  return 2 * call('ZSCORE', key, id)
end
if K[4] then
  call('HSET', K[4], id, A[4])
end
local owner = string.sub(key, #due)
if call('ZADD', due, 'LT', 'CH', ds, owner) == 1 and call('ZRANK', due, owner) == 0 then
  local ch = due .. ':wake'
  local ok = redis.pcall('SPUBLISH', ch, ds)
  if type(ok) == 'table' and ok.err then
    call('PUBLISH', ch, ds)
  end
end
return 2 * d + 1
