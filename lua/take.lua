-- take.lua: read new expiry events of one shard's stream for a consumer
-- group and begin a handler call of each, in one step (Set.Consume
-- WithConcurrency: the reader asks for no more events than it has free
-- call slots, and starts a call for every event begun here at once).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- ARGV[1]  consumer group
-- ARGV[2]  consumer
-- ARGV[3]  the most entries to read (XREADGROUP COUNT; 1 to 1000)
-- ARGV[4..] one token per entry that may be read (ARGV[3] of them): the
--          token of the handler call begun for the i-th entry read
--
-- Each entry is read as XREADGROUP ... > reads it (pending for this
-- consumer, idle 0: its lease starts now) and its attempts go up by one, as
-- begin.lua mode b does for an entry this consumer has just read. An entry
-- that is not for this group (a kicked dead letter of another, field g) or
-- lacks an event's fields (o, m, d) is returned with attempt 0 and not
-- begun: the consumer settles it without a handler call.
-- Reply: {{id, {field, value, ...}, attempt}...} in stream order ({} when
-- nothing is new). Error: NOGROUP when the stream or the group is missing.
local stream, att, group, consumer = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local r = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', ARGV[3], 'STREAMS', stream, '>')
if type(r) == 'table' and r.err then
  return redis.error_reply(r.err)
end
local out = {}
if not r or not r[1] then
  return out
end
for i, e in ipairs(r[1][2]) do
  local id, fs = e[1], e[2]
  local g, o, m, d
  for j = 1, #fs - 1, 2 do
    local k = fs[j]
    if k == 'g' then
      g = fs[j + 1]
    elseif k == 'o' then
      o = true
    elseif k == 'm' then
      m = true
    elseif k == 'd' then
      d = true
    end
  end
  local n = 0
  if (not g or g == group) and o and m and d then
    local field = att_field(id, group)
    n = att_get(att, field) + 1
    call('HSET', att, field, string.format('%d', n) .. ' ' .. ARGV[3 + i])
  end
  out[i] = {id, fs, n}
end
return out
