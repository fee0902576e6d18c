-- job.lua: the state of one job put with Set.Put (Set.Job).
--
-- KEYS[1]  the job's bucket       expset:{name:S}:o:\0job:<b>
-- KEYS[2]  shard event stream     expset:{name:S}:ev
-- KEYS[3]  shard dead letters     expset:{name:S}:dead
-- KEYS[4]  shard attempts hash    expset:{name:S}:att
-- ARGV[1]  job ID (the member)
-- ARGV[2]  the bucket's owner name (the events' o field)
-- ARGV[3]  where to look: "" first (the bucket, then the stream from its
--          newest entry), "ev <ID>" or "dead <ID>" to go on in that stream
--          below entry ID (a cursor this script returned)
-- ARGV[4]  entries to look through in this call (1 to 1000)
--
-- A job in its bucket is waiting; else the newest entry of the shard's
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

-- The newest entry at or below from (from itself excluded unless "+") that
-- carries the job: its ID and due time; else nil and the last ID looked at
-- when more may follow.
local es = call('XREVRANGE', stream, from, '-', 'COUNT', count + 1)
local seen, last = 0, nil
for _, e in ipairs(es) do
  if e[1] ~= from then
    if seen == count then
      break
    end
    seen = seen + 1
    last = e[1]
    local f = e[2]
    local o, m, d
    for j = 1, #f - 1, 2 do
      local k = f[j]
      if k == 'o' then
        o = f[j + 1]
      elseif k == 'm' then
        m = f[j + 1]
      elseif k == 'd' then
        d = f[j + 1]
      end
    end
    if o == owner and m == id then
      if which == 'dead' then
        return {3, tonumber(d)}
      end
      local groups = call('XINFO', 'GROUPS', stream)
      -- No group yet: the first to come reads it.
      local attempt, unread = 0, #groups == 0
      for _, g in ipairs(groups) do
        local name = info(g, 'name')
        local n = 0
        if pending_of(stream, name, e[1]) then
          n = att_get(KEYS[4], att_field(e[1], name))
          if n > attempt then
            attempt = n
          end
        end
        -- Read into a consumer's batch, no call begun: not running yet.
        if n == 0 and (pending_of(stream, name, e[1]) or after(e[1], info(g, 'last-delivered-id') or '0-0')) then
          unread = true
        end
      end
      if attempt > 0 then
        return {2, tonumber(d), attempt}
      elseif unread then
        return {1, tonumber(d)}
      end
      return {0}
    end
  end
end
if seen == count and #es > count then
  return {4, which .. ' ' .. last}
end
if which == 'ev' then
  return {4, 'dead +'}
end
return {0}
