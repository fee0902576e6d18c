-- cancel_waiting.lua: cancel one waiting job put with Set.Put (the first
-- call of Set.Cancel).
--
-- KEYS[1]  the job's bucket       expset:{name:S}:o:\0job:<b>; its owner
--          name (the due index's member) is the key's tail from its \0
-- KEYS[2]  shard due index        expset:{name:S}:due
-- KEYS[3]  the call's receipt     expset:{name:S}:r:#<token>
-- KEYS[4]  the bucket's payloads  expset:{name:S}:p:\0job:<b>, declared
--          only when the set keeps payloads
-- ARGV[1]  job ID (the member)
-- ARGV[2]  how long the receipt lasts, in ms; 0: no receipt
--
-- A job in its bucket, due or not, is removed with its payload (and the
-- bucket's index entry when the bucket is left empty): the sweeper finds
-- nothing of it, no event is written. Else nothing is written, and
-- Set.Cancel goes on with cancel.lua, which looks for the job's event.
--
-- The receipt records what the call cancelled, for a retry of it (a
-- client retries a call whose reply it lost; the server may have run it):
-- written ("1") with NX before anything is removed, deleted when the job
-- was not in its bucket; cancel.lua writes "2" there when it deletes the
-- job's event. A run that finds it returns what it says and writes
-- nothing.
-- Reply: 1 removed from the bucket, 2 its event deleted (by a first run
-- of cancel.lua), 0 not in its bucket.
local key, id = KEYS[1], ARGV[1]
local receipt = ARGV[2] ~= '0'
if receipt then
  local first = call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[2], 'GET')
  if first then
    return tonumber(first)
  end
end
if call('ZREM', key, id) == 0 then
  if receipt then
    call('DEL', KEYS[3])
  end
  return 0
end
if KEYS[4] then
  call('HDEL', KEYS[4], id)
end
if call('EXISTS', key) == 0 then
  call('ZREM', KEYS[2], string.sub(key, string.find(key, '\0', 1, true), -1))
end
return 1
