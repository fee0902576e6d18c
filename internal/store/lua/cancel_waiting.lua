-- cancel_waiting.lua: cancel one waiting job put with Set.Put (the first
-- call of Set.Cancel).
--
-- KEYS[1]  the job's owner key    expset:{name:S}:o:<owner> (Set.Put
--          WithOwner), or its bucket's, expset:{name:S}:o:\0job:<b>
-- KEYS[2]  the call's receipt     expset:{name:S}:r:#<token>
-- KEYS[3]  the owner's payloads   expset:{name:S}:p:<owner> (or
--          p:\0job:<b>), declared only when the set keeps payloads
-- ARGV[1]  job ID (the member)
-- ARGV[2]  how long the receipt lasts, in ms; 0: no receipt
--
-- A job in its owner's set, due or not, is removed with its payload: the
-- sweeper finds nothing of it, no event is written. Else nothing is
-- written, and Set.Cancel goes on with cancel.lua, which looks for the
-- job's event. The bucket's entry in the due index stays, also when the
-- bucket is left empty: the sweeper takes it out (or re-files it) when it
-- comes due, as it does the entry of a job moved later. Checking for an
-- empty bucket here (EXISTS, then ZREM from the index) cost a fifth of the
-- call (bench/README.md); the index holds at most one entry per bucket
-- whatever is cancelled.
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
  local first = call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2], 'GET')
  if first then
    return tonumber(first)
  end
end
if call('ZREM', key, id) == 0 then
  if receipt then
    call('DEL', KEYS[2])
  end
  return 0
end
if KEYS[3] then
  call('HDEL', KEYS[3], id)
end
return 1
