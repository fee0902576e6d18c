-- reschedule_now.lua: move a waiting job to now, its event written at once
-- (Set.Reschedule with delay 0).
--
-- KEYS[1]  the job's owner key    expset:{name:S}:o:<owner>, or its
--          bucket's (o:\0job:<b>); its owner name (the event's o field) is
--          the key's tail from the position #KEYS[2] + 1, as in put_now.lua
-- KEYS[2]  shard event stream     expset:{name:S}:ev
-- KEYS[3]  the call's receipt     expset:{name:S}:r:#<token>
-- KEYS[4]  the owner's payloads   expset:{name:S}:p:<owner> (or
--          p:\0job:<b>), declared only with WithPayloadStorage
-- ARGV[1]  job ID (the member)
-- ARGV[2]  how long the receipt lasts, in ms; 0: no receipt
-- ARGV[3]  now in ms, a decimal integer (absent: the server's TIME)
--
-- A job in its owner's set, due or not, is waiting: it leaves the set, with
-- its payload, and its event is appended to the shard's stream, the entry
-- the sweeper writes (sweep.lua, put_now.lua): fields o, m, d (now, its new
-- due time) and, with a payload, p; one empty message on KEYS[2] ..
-- ':wake' wakes the consumers (write_now.lua). The due index keeps the owner's entry,
-- which the sweeper drops or files anew when it comes due. The payload is
-- read before anything is written, so a payload key of another type fails
-- the call with nothing changed. A job not waiting is not written. The
-- receipt is put.lua's.
-- Reply: the new due time in ms, or false when no job waits.
local K, A = KEYS, ARGV
local key, stream, id, rms = K[1], K[2], A[1], A[2]
local ds = A[3] or time_ms()
local p
if K[4] then
  p = call('HGET', K[4], id)
end
if rms ~= '0' then
  local first = call('SET', K[3], ds, 'NX', 'PX', rms, 'GET')
  if first then
    return tonumber(first)
  end
end
if call('ZREM', key, id) == 0 then
  if rms ~= '0' then
    call('DEL', K[3])
  end
  return false
end
if p then
  call('HDEL', K[4], id)
end
write_now(key, stream, id, ds, p)
return tonumber(ds)
