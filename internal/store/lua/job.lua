-- job.lua: the state of one job put with Set.Put (Set.Job).
--
-- KEYS[1]  the job's owner key    expset:{name:S}:o:<owner> (Set.Put
--          WithOwner), or its bucket's, expset:{name:S}:o:\0job:<b>
-- KEYS[2]  shard event stream     expset:{name:S}:ev
-- KEYS[3]  shard dead letters     expset:{name:S}:dead
-- KEYS[4]  shard attempts hash    expset:{name:S}:att
-- ARGV[1]  job ID (the member)
-- ARGV[2]  the owner's name, or the bucket's (the events' o field)
-- ARGV[3]  where to look: "" first (KEYS[1], then the stream from its
--          newest entry), "ev <ID>" or "dead <ID>" to go on in that stream
--          below entry ID (a cursor this script returned)
-- ARGV[4]  entries to look through in this call (1 to 1000)
--
-- A job in its owner's set is waiting; else the newest entry of the shard's
-- stream that carries it says: a handler call begun in some group and the
-- event not finished there, running (the highest call begun over those
-- groups); not read yet by some group, or read without a call begun,
-- waiting (due, its event written); else done. Else the newest dead letter
-- that carries it: dead. Else unknown.
-- Reply: {1, due ms} waiting, {2, due ms, attempt} running, {3, due ms}
-- dead, {0} unknown or done, or {4, cursor} to call again with ARGV[3] =
-- cursor.
local id, owner, where, count = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if where == '' then
  local due = call('ZSCORE', KEYS[1], id)
  if due then
    return {1, tonumber(due)}
  end
  where = 'ev +'
end
local sp = string.find(where, ' ', 1, true)
local which, from = string.sub(where, 1, sp - 1), string.sub(where, sp + 1)
local stream = KEYS[2]
if which == 'dead' then
  stream = KEYS[3]
end

local eid, d = job_find(stream, owner, id, from, count)
if eid then
  if which == 'dead' then
    return {3, tonumber(d)}
  end
  local attempt, fresh, groups = job_groups(stream, KEYS[4], eid)
  if attempt > 0 then
    return {2, tonumber(d), attempt}
  elseif fresh[1] or groups == 0 then
    -- Not begun by some group (none yet: the first to come reads it).
    return {1, tonumber(d)}
  end
  return {0}
end
if d then
  return {4, which .. ' ' .. d}
end
if which == 'ev' then
  return {4, 'dead +'}
end
return {0}
