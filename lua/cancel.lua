-- cancel.lua: cancel one job put with Set.Put (Set.Cancel), until a
-- handler call of it begins.
--
-- KEYS[1]  the job's bucket       expset:{name:S}:o:\0job:<b>
-- KEYS[2]  shard due index        expset:{name:S}:due
-- KEYS[3]  shard event stream     expset:{name:S}:ev
-- KEYS[4]  the bucket's payloads  expset:{name:S}:p:\0job:<b>
-- KEYS[5]  shard attempts hash    expset:{name:S}:att
-- ARGV[1]  job ID (the member)
-- ARGV[2]  the bucket's owner name (the events' o field)
-- ARGV[3]  flags (see prelude: p)
-- ARGV[4]  where to look: "" first (the bucket, then the stream from its
--          newest entry), or an entry ID to go on in the stream below it
--          (a cursor this script returned)
-- ARGV[5]  entries to look through in this call (1 to 1000)
--
-- A job in its bucket, due or not, is removed with its payload (and the
-- bucket's index entry when the bucket is left empty): the sweeper finds
-- nothing of it, no event is written. Else the newest entry of the
-- shard's stream that carries the job is deleted, if no consumer group has
-- begun a handler call of it: each group has not read it yet, or holds it
-- pending without a call begun (read into a consumer's batch: it is
-- acknowledged, so that the consumer's begin finds nothing and makes no
-- call; begins.lua replies 0). A call given back as Consume stopped counts
-- as not begun. An entry kicked back from the dead letters (field g) had
-- its calls: it stays.
-- Reply: {1} removed from the bucket, {2} its event deleted, {0} nothing
-- cancelled (no such job, or a call of its newest event begun), or {4,
-- cursor} to call again with ARGV[4] = cursor.
local key, id, owner, where = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
if where == '' then
  if call('ZREM', key, id) == 1 then
    if string.find(ARGV[3], 'p', 1, true) then
      call('HDEL', KEYS[4], id)
    end
    if call('EXISTS', key) == 0 then
      call('ZREM', KEYS[2], owner)
    end
    return {1}
  end
  where = '+'
end

local stream, att = KEYS[3], KEYS[5]
local eid, last, g = job_find(stream, owner, id, where, tonumber(ARGV[5]))
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
for _, f in ipairs(fresh) do
  if f[2] then
    call('XACK', stream, f[1], eid)
  end
end
call('XDEL', stream, eid)
return {2}
