-- cancel.lua: cancel one job put with Set.Put (Set.Cancel), until a
-- handler call of it begins.
--
-- KEYS[1]  shard event stream     expset:{name:S}:ev
-- KEYS[2]  shard attempts hash    expset:{name:S}:att
-- KEYS[3]  the call's receipt     expset:{name:S}:r:#<token>
-- ARGV[1]  job ID (the member)
-- ARGV[2]  the owner's name, or the bucket's (the events' o field)
-- ARGV[3]  where to look: "+" from the stream's newest entry, or an
--          entry ID to go on below it (a cursor this script returned)
-- ARGV[4]  entries to look through in this call (1 to 1000)
-- ARGV[5]  how long the receipt lasts, in ms; 0: no receipt
--
-- Called after cancel_waiting.lua found no job in its bucket: the newest
-- entry of the shard's stream that carries the job is deleted, if no
-- consumer group has begun a handler call of it: each group has not read it yet, or holds it
-- pending without a call begun (read into a consumer's batch: it is
-- acknowledged, so that the consumer's begin finds nothing and makes no
-- call; begins.lua replies 0). A call given back as Consume stopped counts
-- as not begun. An entry kicked back from the dead letters (field g) had
-- its calls: it stays. Each group's attempts field of an entry
-- acknowledged so gets a mark, "0 -" (no call, token "-"): the consumer
-- holding it may begin it without a look at the pending list, but not past
-- the mark (see begins.lua). The begin of that consumer, or its release of
-- the entry as it stops, deletes the mark; one that dies first leaves it
-- (a few bytes).
-- The receipt is cancel_waiting.lua's: a call that finds it returns what
-- it says and writes nothing, and the call that deletes an event writes
-- "2" there.
-- Reply: {1} or {2} what the receipt says, {2} its event deleted, {0} nothing
-- cancelled (no such job, or a call of its newest event begun), or {4,
-- cursor} to call again with ARGV[3] = cursor.
local id, owner, where = ARGV[1], ARGV[2], ARGV[3]
if ARGV[5] ~= '0' then
  local receipt = call('GET', KEYS[3])
  if receipt then
    return {tonumber(receipt)}
  end
end

local stream, att = KEYS[1], KEYS[2]
local eid, last, g = job_find(stream, owner, id, where, tonumber(ARGV[4]))
if not eid then
  if last then
    return {4, last}
  end
  return {0}
end
if g then
  return {0}
end
local attempt, fresh, groups = job_groups(stream, att, eid)
if attempt > 0 or #fresh < groups then
  return {0}
end
-- A consumer may begin an event it read without a look at the pending
-- list (begins.lua's fresh items); its write of the attempts field finds
-- the mark and begins nothing.
for _, f in ipairs(fresh) do
  if f[2] then
    call('XACK', stream, f[1], eid)
    call('HSET', att, att_field(eid, f[1]), '0 -')
  end
end
call('XDEL', stream, eid)
if ARGV[5] ~= '0' then
  call('SET', KEYS[3], '2', 'PX', ARGV[5])
end
return {2}
