-- put_now.lua: put one job due at once unless a job of its ID is waiting
-- (Set.Put with delay 0).
--
-- KEYS[1]  the job's owner key    expset:{name:S}:o:<owner> (Set.Put
--          WithOwner), or its bucket's, expset:{name:S}:o:\0job:<b>; its
--          owner name (the event's o field) is the key's tail from the
--          position #KEYS[2] + 1 (the keys share their prefix, and "ev"
--          is as long as "o:")
-- KEYS[2]  shard event stream     expset:{name:S}:ev
-- KEYS[3]  the call's receipt     expset:{name:S}:r:#<token>
-- ARGV[1]  job ID (the member)
-- ARGV[2]  how long the receipt lasts, in ms; 0: no receipt (the client
--          never sends a call again)
-- #ARGV says whether the rest follow (WithClock sends ARGV[4]):
-- ARGV[3]  the payload (absent: none); with ARGV[4], a payload only when
--          ARGV[5] is given, else ""
-- ARGV[4]  now in ms, a decimal integer (absent: the server's TIME)
-- ARGV[5]  "p" when ARGV[3] is a payload (with ARGV[4] only)
--
-- A job in its owner's set (a member of that ID), due or not, is waiting:
-- it is left as it is, as put.lua leaves it. Else the job's event is
-- appended to the shard's stream at once, the entry the sweeper would
-- have written for it (sweep.lua): fields o (the owner, or the bucket),
-- m (the ID), d (now, the due time, in decimal ms) and, with a payload, p.
-- Nothing is written to the owner's set, its payload hash or the due
-- index. One empty message on the stream's wake-up channel, KEYS[2] ..
-- ':wake' (notify.go), wakes the consumers, as a sweep that wrote events
-- does. The entry and the wake-up are write_now's (write_now.lua).
--
-- The receipt is put.lua's: a string key with a TTL, written first with
-- NX, holding the due time; a run that finds it returns that as written
-- and writes nothing; a run that writes no event deletes it.
--
-- The due time is time_ms's (time_ms.lua): no number is parsed or
-- formatted for it.
-- Reply: put.lua's, one integer: 2 x due time + 1 when put, 2 x the
-- waiting job's deadline when not.
local K, A = KEYS, ARGV
local key, stream, id, rms = K[1], K[2], A[1], A[2]
local p, ds = A[3], A[4]
if not ds then
  ds = time_ms()
elseif not A[5] then
  p = nil
end
if rms ~= '0' then
  local first = call('SET', K[3], ds, 'NX', 'PX', rms, 'GET')
  if first then
    return 2 * first + 1
  end
end
local waiting = call('ZSCORE', key, id)
if waiting then
  if rms ~= '0' then
    call('DEL', K[3])
  end
  return 2 * waiting
end
write_now(key, stream, id, ds, p)
return 2 * ds + 1
