-- running.lua: the events of one shard with a handler call begun and not
-- finished, and where each stands in its group's pending list (Set.Running,
-- Set.Groups). It only reads.
--
-- KEYS[1]  shard attempts hash  expset:{name:S}:att
-- KEYS[2]  shard event stream   expset:{name:S}:ev
-- ARGV[1]  consumer group, or "" for every group
-- ARGV[2]  cursor: where the scan of the attempts hash resumes ("0" to
--          start)
--
-- A call reads about MAX_BATCH attempts fields (HSCAN), of every group.
-- Each field of the group (of any group for "") whose value carries a
-- call's token and no retry time (groups.lua: "<calls> <token>" or
-- "<calls> <token> <slot>", a slot's field "F:..." or "N:...") and whose entry is pending under a consumer
-- other than RETRY_HOLDER is returned, with its pending state (XPENDING)
-- and its event's owner and member (XRANGE; "" when the entry was deleted).
-- Whether a call of it is under way is the client's to tell from the
-- token (calltoken.go). With a group, the first page also counts the
-- group's pending entries not held for a retry (XPENDING, summary form).
-- Reply: {the group is on the stream (0/1; 1 for ""), the next cursor ("0":
-- done), those pending entries (0 without a group or after the first
-- page), then for each event: group, entry ID, consumer, idle ms,
-- deliveries, the attempts field's value, owner, member}.
local att, stream, group = KEYS[1], KEYS[2], ARGV[1]
local on, waiting = 1, 0
if group ~= '' then
  on = 0
  if ARGV[2] == '0' and call('EXISTS', stream) == 1 then
    for _, x in ipairs(call('XINFO', 'GROUPS', stream)) do
      if info(x, 'name') == group then
        on = 1
      end
    end
    if on == 1 then
      local p = call('XPENDING', stream, group)
      waiting = p[1]
      for _, c in ipairs(p[4] or {}) do
        if c[1] == RETRY_HOLDER then
          waiting = waiting - tonumber(c[2])
        end
      end
    end
  end
end
local r = call('HSCAN', att, ARGV[2], 'COUNT', MAX_BATCH)
local out = {on, r[1], waiting}
local kv = r[2]
for i = 1, #kv - 1, 2 do
  -- The field is "<entry ID> <group>" (att_field), the value as att_get
  -- reads it.
  local f, v = kv[i], kv[i + 1]
  local sp = string.find(f, ' ', 1, true)
  local g = sp and string.sub(f, sp + 1)
  local sp1 = string.find(v, ' ', 1, true)
  local sp2 = sp1 and string.find(v, ' ', sp1 + 1, true)
  if g and (group == '' or g == group) and sp1 and (not sp2 or string.byte(v, sp2 + 1) == 70 or string.byte(v, sp2 + 1) == 78) then
    local id = string.sub(f, 1, sp - 1)
    local p = redis.pcall('XPENDING', stream, g, id, id, '1')
    p = type(p) == 'table' and not p.err and p[1]
    if p and p[2] ~= RETRY_HOLDER then
      local e = call('XRANGE', stream, id, id)[1]
      local o, m = '', ''
      if e then
        o, m = info(e[2], 'o') or '', info(e[2], 'm') or ''
      end
      out[#out + 1] = g
      out[#out + 1] = id
      out[#out + 1] = p[2]
      out[#out + 1] = p[3]
      out[#out + 1] = p[4]
      out[#out + 1] = v
      out[#out + 1] = o
      out[#out + 1] = m
    end
  end
end
return out
