-- jobs.lua: helpers of the job scripts (job, cancel), after groups.lua.

-- job_find looks through stream, newest first, below entry ID from (at
-- the newest entry when from is "+"), at at most count entries, for the
-- newest that carries job id of the bucket owner (fields o and m). It
-- returns that entry's ID, its fields d (the due time) and g (set on a
-- dead letter kicked back for one group); else nil and, when entries below
-- were left unread, the ID of the last one looked at.
local function job_find(stream, owner, id, from, count)
  local es = call('XREVRANGE', stream, from, '-', 'COUNT', count + 1)
  local seen, last = 0, nil
  for _, e in ipairs(es) do
    if e[1] ~= from then
      if seen == count then
        return nil, last
      end
      seen = seen + 1
      last = e[1]
      local f = e[2]
      local o, m, d, g
      for j = 1, #f - 1, 2 do
        local k = f[j]
        if k == 'o' then
          o = f[j + 1]
        elseif k == 'm' then
          m = f[j + 1]
        elseif k == 'd' then
          d = f[j + 1]
        elseif k == 'g' then
          g = f[j + 1]
        end
      end
      if o == owner and m == id then
        return e[1], d, g
      end
    end
  end
  return nil, nil
end

-- job_groups returns, for entry eid of stream: the highest handler call
-- of it begun over the consumer groups that have one under way (pending
-- with its attempts field in att: running, or waiting for its retry; a
-- call given back as Consume stopped counts as never begun), 0 when none;
-- the groups that have not begun one (not read yet, or read into a
-- consumer's batch and pending without a call), as {name, pending} pairs;
-- and the number of groups. Those in neither have finished the event
-- (acknowledged or buried it).
local function job_groups(stream, att, eid)
  local groups = call('XINFO', 'GROUPS', stream)
  local attempt, fresh = 0, {}
  for _, g in ipairs(groups) do
    local name = info(g, 'name')
    local pending = pending_of(stream, name, eid) ~= nil
    local n = 0
    if pending then
      n = att_get(att, att_field(eid, name))
    end
    if n > attempt then
      attempt = n
    end
    if n == 0 and (pending or after(eid, info(g, 'last-delivered-id') or '0-0')) then
      fresh[#fresh + 1] = {name, pending}
    end
  end
  return attempt, fresh, #groups
end
