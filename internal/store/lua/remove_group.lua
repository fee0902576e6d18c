-- remove_group.lua: remove a consumer group from one shard, with all it
-- holds (Set.RemoveGroup).
--
-- KEYS[1]  shard event stream        expset:{name:S}:ev
-- KEYS[2]  shard dead-letter stream  expset:{name:S}:dead
-- KEYS[3]  shard attempts hash       expset:{name:S}:att
-- KEYS[4]  shard owner slots          expset:{name:S}:runo  (see groups.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  where the scan of the dead letters resumes: "-" to start, else
--          the last dead-letter ID the previous call read
--
-- Each call does at most 1000 items of work, and the caller calls again
-- until it is done: first the group's pending entries, 1000 at a time, are
-- acknowledged with their attempts cleared (and owner slots freed); once none is left, the group is
-- destroyed and the entries no other group needs are deleted (see forget in
-- groups.lua; with no group left the stream keeps them for retention, so a
-- group created later starts at the oldest); then the dead-letter stream is
-- scanned, 1000 at a time, and the group's dead letters deleted.
-- Reply: {done (0/1), pending released, unread entries the group had (its
-- lag; -1 when Redis cannot tell), dead letters deleted, cursor, the group
-- was on the stream (0/1)}.
local stream, dead, att, group = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
RUNO = KEYS[4]
local released, lag, found = 0, 0, 0
if ARGV[2] == '-' and call('EXISTS', stream) == 1 then
  local g
  for _, x in ipairs(call('XINFO', 'GROUPS', stream)) do
    if info(x, 'name') == group then
      g = x
    end
  end
  if g then
    found = 1
    local p = call('XPENDING', stream, group, '-', '+', '1000')
    local ids = {}
    for i, e in ipairs(p) do
      ids[i] = e[1]
      att_clear(att, e[1], group)
    end
    if #ids > 0 then
      call('XACK', stream, group, unpack(ids))
    end
    released = #ids
    if #ids == 1000 then
      return {0, released, 0, 0, '-', found}
    end
    lag = tonumber(info(g, 'lag') or -1) or -1
    call('XGROUP', 'DESTROY', stream, group)
    -- The group's own pause (pause.lua) goes with it; owners paused in it
    -- stay paused (a group made again under the name finds them) until
    -- each is resumed.
    if call('HDEL', att, 'G:' .. group) == 1 then
      local q = call('HGET', att, 'Q:' .. group)
      if q then
        call('HSET', att, 'P:' .. group, q)
      else
        call('HDEL', att, 'P:' .. group)
      end
    end
    local first = call('XRANGE', stream, '-', '+', 'COUNT', '1')[1]
    if first and call('XLEN', stream) > 0 and #call('XINFO', 'GROUPS', stream) > 0 then
      ids[#ids + 1] = first[1]
      table.sort(ids, function(a, b) return after(b, a) end)
      forget(stream, ids, group)
    end
  end
end
local from = '-'
if ARGV[2] ~= '-' then
  from = '(' .. ARGV[2]
end
local r = call('XRANGE', dead, from, '+', 'COUNT', '1000')
local del = {}
for _, e in ipairs(r) do
  local f = e[2]
  for i = 1, #f - 1, 2 do
    if f[i] == 'g' and f[i + 1] == group then
      del[#del + 1] = e[1]
    end
  end
end
if #del > 0 then
  call('XDEL', dead, unpack(del))
end
if #r == 1000 then
  return {0, released, lag, #del, r[#r][1], found}
end
return {1, released, lag, #del, '', found}
