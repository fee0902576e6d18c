-- groups.lua: helpers of the consumer-group scripts (ack, begin, bury,
-- claim, release, prune). scripts.go puts it after prelude.lua and before
-- those scripts' bodies only, so the scripts of the write path stay small.
--
-- Attempts: the shard's attempts hash (KEYS of the script, expset:{name:S}:att)
-- holds, for each event a handler call of a group has begun and not yet
-- finished for good, the field "<entry ID> <group>" -> "<handler calls
-- begun> <token of the last call begun>" (the token, so that a begin the
-- client sent twice counts once; "<calls>" alone once a call was given
-- back; "<calls> <token> <not before>" while a retry delay longer than the
-- lease TTL runs). One field per event keeps the hash small: a listpack, whose every
-- lookup is a scan, holds twice the events it would with two fields each.
-- Reading, claiming and releasing an event never touch it.

local function att_field(id, group)
  return id .. ' ' .. group
end

-- RETRY_HOLDER is the consumer that holds events waiting for their retry
-- delay (retryHolder in retry.go; see retry.lua).
local RETRY_HOLDER = 'expset:retry'

-- att_get returns the handler calls begun of field in att (0 when none),
-- the token of the last call begun (nil when none) and the time in ms
-- before which the event must not be delivered again (nil when none: see
-- retry.lua). The field is "<calls>", "<calls> <token>" or "<calls> <token>
-- <not before>".
local function att_get(att, field)
  local v = call('HGET', att, field)
  if not v then
    return 0, nil, nil
  end
  local sp = string.find(v, ' ', 1, true)
  if not sp then
    return tonumber(v), nil, nil
  end
  local sp2 = string.find(v, ' ', sp + 1, true)
  if not sp2 then
    return tonumber(string.sub(v, 1, sp - 1)), string.sub(v, sp + 1), nil
  end
  return tonumber(string.sub(v, 1, sp - 1)), string.sub(v, sp + 1, sp2 - 1), tonumber(string.sub(v, sp2 + 1))
end

-- att_clear deletes the attempts field of id in group.
local function att_clear(att, id, group)
  call('HDEL', att, att_field(id, group))
end

-- pending_of returns the consumer holding id pending in group, and its idle
-- time in ms; nil when id is not pending in group.
local function pending_of(stream, group, id)
  local p = call('XPENDING', stream, group, id, id, 1)[1]
  if not p then
    return nil, 0
  end
  return p[2], tonumber(p[3])
end

-- hold makes consumer hold id, pending in group, with idle time idle (0
-- when nil) without counting a delivery (XCLAIM ... JUSTID), and reports
-- whether the entry is still there: Redis drops an entry deleted from the
-- stream (retention trimmed it) from the pending list when it is claimed,
-- and then its attempts field goes too, so nothing is left behind.
local function hold(stream, att, group, consumer, id, idle)
  local r
  if idle then
    r = call('XCLAIM', stream, group, consumer, 0, id, 'IDLE', idle, 'JUSTID')
  else
    r = call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
  end
  if r[1] then
    return true
  end
  att_clear(att, id, group)
  return false
end

-- info returns field k of an XINFO reply: a flat list on Redis, a table
-- keyed by name on some emulators.
local function info(t, k)
  if t[k] ~= nil then
    return t[k]
  end
  for i = 1, #t - 1, 2 do
    if t[i] == k then
      return t[i + 1]
    end
  end
  return nil
end

-- split returns the two numbers of stream ID id ("ms-seq", or "ms" alone
-- for "ms-0"; ms has at most 13 digits and seq is small: exact in a double).
local function split(id)
  local d = string.find(id, '-', 1, true)
  if not d then
    return tonumber(id), 0
  end
  return tonumber(string.sub(id, 1, d - 1)), tonumber(string.sub(id, d + 1))
end

-- after reports whether stream ID a comes after stream ID b.
local function after(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  if am ~= bm then
    return am > bm
  end
  return as > bs
end

-- after_last returns the stream ID just after id: the lowest one a group
-- whose last-delivered ID is id has not read.
local function after_last(id)
  local ms, seq = split(id)
  return string.format('%.0f-%.0f', ms, seq + 1)
end

-- forget deletes from stream the entries of ids that no consumer group still
-- needs: every group other than done (which has just acknowledged or buried
-- them) has read past each one and holds it pending nowhere. So the stream
-- holds only entries some group still needs; a group created later starts
-- at the oldest entry left. The entries below the floor (the lowest ID some
-- group has not read or holds pending, over every group) go by one XTRIM
-- MINID, which walks the stream's first node once instead of once per
-- entry as XDEL does; those ids above it that no group needs go by XDEL.
-- Below the floor every group has read every entry and holds none pending,
-- so the trim removes only entries no group needs (also ones a forget
-- before left, such as those of a group destroyed while holding them).
-- Returns how many it deleted.
local function forget(stream, ids, done)
  local groups = call('XINFO', 'GROUPS', stream)
  -- No group has read past the lowest last-delivered ID: the floor is at
  -- most the ID after it. Only when ids lie below that is the floor worth
  -- its XPENDING per group (not while a group lags behind).
  local floor
  for _, g in ipairs(groups) do
    local low = after_last(info(g, 'last-delivered-id'))
    if not floor or after(floor, low) then
      floor = low
    end
  end
  -- ids come in stream order, mostly: the first stands for them (a gate
  -- for the cost only; each id is checked on its own below).
  if floor and ids[1] and after(floor, ids[1]) then
    for _, g in ipairs(groups) do
      local p = call('XPENDING', stream, info(g, 'name'))
      if tonumber(p[1]) > 0 and after(floor, p[2]) then
        floor = p[2]
      end
    end
  else
    floor = nil
  end
  local del = {}
  for _, id in ipairs(ids) do
    if not (floor and after(floor, id)) then -- else the trim takes it
      local needed = false
      for _, g in ipairs(groups) do
        local name = info(g, 'name')
        if name ~= done then
          local last = info(g, 'last-delivered-id')
          if after(id, last) or call('XPENDING', stream, name, id, id, 1)[1] then
            needed = true
            break
          end
        end
      end
      if not needed then
        del[#del + 1] = id
      end
    end
  end
  local n = 0
  if floor then
    n = call('XTRIM', stream, 'MINID', floor)
  end
  if #del > 0 then
    n = n + call('XDEL', stream, unpack(del))
  end
  return n
end

-- bury moves entry id, pending in group, to the dead-letter stream dead:
-- the event's fields (fields, a flat list; o, m, d, p, r) plus id (its ID in
-- stream), g (group), c (consumer), a (attempts) and err (reason); then
-- acknowledges it in group, clears its attempts and forgets it.
local function bury(stream, dead, att, group, consumer, id, fields, attempts, reason)
  local args = {}
  for i = 1, #fields, 2 do
    local k = fields[i]
    if k == 'o' or k == 'm' or k == 'd' or k == 'p' or k == 'r' then
      args[#args + 1] = k
      args[#args + 1] = fields[i + 1]
    end
  end
  call('XADD', dead, '*', 'id', id, 'g', group, 'c', consumer, 'a', attempts, 'err', reason, unpack(args))
  call('XACK', stream, group, id)
  att_clear(att, id, group)
  forget(stream, {id}, group)
end
