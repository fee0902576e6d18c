-- forget.lua: helpers of the consumer-group scripts that read a stream's
-- groups and delete or bury its entries (ack, bury, claim, prune,
-- remove_group, running, the job scripts). scripts.go puts it after
-- groups.lua, whose helpers it uses.

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

-- after reports whether stream ID a comes after stream ID b ("ms-seq", or
-- "ms" alone for "ms-0"). The parts are decimal numbers without leading
-- zeros, compared as strings (the longer is the larger; of equal length,
-- the greater string): tonumber would cost a strtod each.
local function after(a, b)
  if a == b then
    return false
  end
  local da = string.find(a, '-', 1, true)
  if not da then
    a = a .. '-0'
    da = #a - 1
  end
  local db = string.find(b, '-', 1, true)
  if not db then
    b = b .. '-0'
    db = #b - 1
  end
  if da ~= db then
    return da > db
  end
  local sa, sb = #a - da, #b - db
  if sa == sb or string.sub(a, 1, da) ~= string.sub(b, 1, db) then
    return a > b
  end
  return sa > sb
end

-- after_last returns the stream ID just after id: the lowest one a group
-- whose last-delivered ID is id has not read (its sequence plus one, in
-- decimal digits).
local function after_last(id)
  local d = string.find(id, '-', 1, true)
  if not d then
    return id .. '-1'
  end
  local i = #id
  while i > d and string.byte(id, i) == 57 do -- '9' carries
    i = i - 1
  end
  if i == d then
    return string.sub(id, 1, d) .. '1' .. string.rep('0', #id - d)
  end
  return string.sub(id, 1, i - 1) .. string.char(string.byte(id, i) + 1) .. string.rep('0', #id - i)
end

-- forget_rest is forget once the stream's groups are read; with trim, it
-- trims to the floor whatever ids are.
local function forget_rest(stream, groups, ids, done, trim)
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
  if floor and (trim or ids[1] and after(floor, ids[1])) then
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
          if after(id, last) or call('XPENDING', stream, name, id, id, '1')[1] then
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
  -- With done the only group, no group needs ids: a few go by XDEL, which
  -- costs less than finding the floor and trimming to it (measured: 3 ids
  -- less, 10 more; bench/README.md). Unless the stream then holds more than
  -- the group still needs (pending or unread: entries a forget before
  -- left), that is all.
  local g = groups[1]
  if #ids < 4 and #groups == 1 and info(g, 'name') == done then
    local n = call('XDEL', stream, unpack(ids))
    -- (lag counts the entries the group has not read; an emulator without
    -- entries-read gives no true lag.)
    local lag = info(g, 'entries-read') and tonumber(info(g, 'lag') or -1) or -1
    if lag >= 0 and call('XLEN', stream) <= tonumber(info(g, 'pending')) + lag then
      return n
    end
    return n + forget_rest(stream, groups, {}, done, true)
  end
  return forget_rest(stream, groups, ids, done)
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
