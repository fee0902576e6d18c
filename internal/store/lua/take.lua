-- take.lua: read new expiry events of one shard's stream for a consumer
-- group and begin a handler call of each, in one step, reading past the
-- events of owners at their cap (Set.Consume WithOwnerConcurrency: the
-- reader asks for no more calls than it has free call slots, and starts a
-- call for every event begun here at once; without a cap it reads with a
-- plain XREADGROUP and begins with begins.lua).
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard take receipts  expset:{name:S}:take
-- KEYS[4]  shard owner slots    expset:{name:S}:run   (see slots.lua)
-- KEYS[5]  their owners         expset:{name:S}:runo
-- ARGV[1]  consumer group
-- ARGV[2]  consumer
-- ARGV[3]  the most calls to begin (1 to 1000)
-- ARGV[4]  the owners' cap, WithOwnerConcurrency (1 or more)
-- ARGV[5]  the most entries to read (ARGV[3] to 1000)
-- ARGV[6]  the lease TTL in ms: a slot's lease
-- ARGV[7]  how many entries the first read takes (ARGV[3] to ARGV[5])
-- ARGV[8..] one token per call that may be begun (ARGV[3] of them): the
--          i-th call begun here gets the i-th
--
-- A take the client sends twice (go-redis sends a script again after a
-- read timeout, and the server may run both) reads and begins once: each
-- take that reads anything records a receipt in KEYS[3] (field "<group>
-- NUL <consumer>": its first token, then "<id>:<attempt>" of each entry
-- it returned), and a take whose first token is the receipt's returns that
-- reply again (the entries as the stream holds them now) instead of
-- reading new entries, whose calls no one would make.
--
-- Each entry is read as XREADGROUP ... > reads it (pending for this
-- consumer, idle 0: its lease starts now) and its attempts go up by one,
-- with the call's token (see begins.lua). An entry
-- that is not for this group (a kicked dead letter of another, field g) or
-- lacks an event's fields (o, m, d) is returned with attempt 0 and not
-- begun: the consumer settles it without a handler call.
--
-- The first read takes ARGV[7] entries and begins the first ARGV[3]
-- events among them; the events past those whose owners have room are
-- returned with attempt -3, read ahead and not begun: the consumer begins
-- each with begins.lua when it has a call slot for it (charging no attempt
-- before), unless another consumer claimed it meanwhile. With a
-- cap, a call of an owner (not a job's) takes one of its slots (slot_take),
-- and an entry whose owner holds every slot, counting those taken here, is
-- read and not begun (attempt -2): the consumer sets it aside. So that such
-- entries hold up no other owner's, the script reads on past them until
-- ARGV[3] calls are begun, ARGV[5] entries are read or no new entry is
-- left, yet reads no entry it could begin and has no call for: after its
-- first read it looks ahead (XRANGE from the last entry read, which the
-- group's next read starts after) and reads only up to the entry that
-- takes the last call.
-- Reply: {{id, {field, value, ...}, attempt, full}...} in stream order ({}
-- when nothing is new), full 1 when the call begun took its owner's last
-- free slot (its next events wait for this call's end), else 0. Error: NOGROUP when the stream or the group is missing.
local stream, att, receipts, group, consumer = KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]
local want, cap = tonumber(ARGV[3]), tonumber(ARGV[4])
local out, begun = {}, 0

local rfield = group .. '\0' .. consumer
local last = call('HGET', receipts, rfield)
if last and string.sub(last, 1, #ARGV[8] + 1) == ARGV[8] .. ' ' then
  -- This take ran before: its reply again.
  for id, n in string.gmatch(string.sub(last, #ARGV[8] + 2), '([^ :]+):(%S+)') do
    local e = call('XRANGE', stream, id, id)[1]
    if e then
      out[#out + 1] = {id, e[2], tonumber(n), 0}
    end
  end
  return out
end

-- receipt records the entries of out as this take's (see above).
local function receipt()
  if #out == 0 then
    return
  end
  local parts = {ARGV[8]}
  for i, e in ipairs(out) do
    parts[i + 1] = e[1] .. ':' .. string.format('%d', e[3])
  end
  call('HSET', receipts, rfield, table.concat(parts, ' '))
end

local first = tonumber(ARGV[7])
local r = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', first, 'STREAMS', stream, '>')
if type(r) == 'table' and r.err then
  return redis.error_reply(r.err)
end
if not r or not r[1] then
  return out
end

local limit, vis = tonumber(ARGV[5]), tonumber(ARGV[6])
local now = slot_time()
slot_lapse(KEYS[4], KEYS[5], now)
local held = {} -- slots each owner seen holds, with the calls begun here

-- verdict tells what to do with an entry of fields fs, with extra more
-- slots taken per owner than held says: 1 begin a call (and the owner whose
-- slot it takes, nil for none), -2 set it aside, 0 leave it to the consumer.
local function verdict(fs, extra)
  local g, o, m, d
  for j = 1, #fs - 1, 2 do
    local k = fs[j]
    if k == 'g' then
      g = fs[j + 1]
    elseif k == 'o' then
      o = fs[j + 1]
    elseif k == 'm' then
      m = true
    elseif k == 'd' then
      d = true
    end
  end
  if (g and g ~= group) or not (o and m and d) then
    return 0
  end
  if string.sub(o, 1, 5) == '\0job:' then
    return 1
  end
  local n = held[o]
  if not n then
    n = slot_held(KEYS[5], group, o)
    held[o] = n
  end
  if n + (extra[o] or 0) >= cap then
    return -2
  end
  return 1, o
end

-- take settles the entries just read, in order.
local function take(entries)
  local none = {}
  for _, e in ipairs(entries) do
    local id, fs = e[1], e[2]
    local n, o = verdict(fs, none)
    local full = 0
    if n == 1 and begun == want then
      n = -3 -- read ahead (the first read's), not begun
    elseif n == 1 then
      local field = att_field(id, group)
      n = att_get(att, field) + 1
      begun = begun + 1
      call('HSET', att, field, string.format('%d', n) .. ' ' .. ARGV[7 + begun])
      if o then
        slot_take(KEYS[4], KEYS[5], field, group, o, cap, vis, now)
        held[o] = held[o] + 1
        if held[o] >= cap then
          full = 1
        end
      end
    end
    out[#out + 1] = {id, fs, n, full}
  end
end

-- ahead returns how many of the (at most look) entries after id to read
-- so that at most calls of them are begun.
local function ahead(id, calls, look)
  local es = call('XRANGE', stream, '(' .. id, '+', 'COUNT', look)
  local extra = {}
  for i, e in ipairs(es) do
    local n, o = verdict(e[2], extra)
    if n == 1 then
      calls = calls - 1
      if calls == 0 then
        return i
      end
      if o then
        extra[o] = (extra[o] or 0) + 1
      end
    end
  end
  return #es
end

-- After the first read, read on past the owners at their cap while calls
-- are left, the stream had all the first read asked for, and the reads
-- stay within ARGV[5] entries.
local es, count = r[1][2], first
take(es)
while begun < want and #es == count and #out < limit do
  count = ahead(es[#es][1], want - begun, math.min(limit - #out, 100))
  if count == 0 then
    break
  end
  r = call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', stream, '>')
  if not r or not r[1] then
    break
  end
  es = r[1][2]
  take(es)
end
receipt()
return out
