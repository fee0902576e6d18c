-- schedule.lua: writes one recurring schedule (schedules.go): put,
-- resume, pause, remove, or refill its upcoming ticks.
--
-- KEYS[1]  the shard's schedules    expset:{name:S}:o:\0job:sched (zset: ID -> next tick, ms)
-- KEYS[2]  their records            expset:{name:S}:sched (hash)
-- KEYS[3]  the shard's due index    expset:{name:S}:due
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  op: put, resume, pause, remove or refill
-- ARGV[3]  the schedule's ID
-- put:     ARGV[4] catch-up (-1 all, else the most missed ticks that fire),
--          ARGV[5] configuration (Go's, kept as given), ARGV[6] "1" when a
--          payload follows in ARGV[7]; ARGV[8..] upcoming ticks, ascending
-- resume:  ARGV[4] the generation read; ARGV[5..] upcoming ticks, ascending
-- refill:  ARGV[4] the generation read, ARGV[5] the tail the ticks follow;
--          ARGV[6..] ticks after it, ascending
--
-- A record has three fields: c:<ID> the configuration, p:<ID> the payload
-- (when there is one) and t:<ID> the tick state, decimal integers joined by
-- spaces: "gen catch paused fired seen t1 ... tk". gen counts the puts
-- (resume and refill apply only to the generation they computed ticks
-- for); fired is the latest tick written as an event (0 before the first);
-- seen the latest tick taken off the list (fired or skipped), or the put's
-- or resume's now; t1..tk the upcoming ticks, ascending, each > seen. A
-- schedule not paused is in KEYS[1] at t1, or, with no tick listed, at now
-- + PARK (sweep.lua asks Go for more: see schedules.go).
--
-- Ticks at or before now are dropped by put and resume: a new or changed
-- spec, or a resumed schedule, fires from its next tick after now.
--
-- Reply: put and resume {next, paused}: the next tick (ms, -1 when none is
--   listed yet or paused) and 1 when paused; resume of a schedule whose
--   generation changed meanwhile: -2 (read again); unknown ID: false.
--   pause: 1, or false for an unknown ID. remove: 1 removed, 0 unknown.
--   refill: the ticks appended (0 when the generation or the tail moved).
local sched, rec, due = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms(ARGV[1])
local op, id = ARGV[2], ARGV[3]
local SCHED = '\0job:sched'
local PARK = 1000
local F = '%d'

local function fmt(x)
  return string.format(F, x)
end

local function read()
  local r = call('HGET', rec, 't:' .. id)
  if not r then
    return nil
  end
  local v = {}
  for w in string.gmatch(r, '%S+') do
    v[#v + 1] = tonumber(w)
  end
  return v
end

-- write stores v and files the schedule at its first tick (or parks it),
-- unless paused. It returns the first tick, -1 when none.
local function write(v)
  local parts = {}
  for i = 1, #v do
    parts[i] = fmt(v[i])
  end
  call('HSET', rec, 't:' .. id, table.concat(parts, ' '))
  local head = v[6] or -1
  if v[3] == 1 then
    call('ZREM', sched, id)
    return head
  end
  local at = head
  if at < 0 then
    at = now + PARK
  end
  call('ZADD', sched, fmt(at), id)
  lib().file_owner(due, SCHED, fmt(at), at - now, now, true)
  return head
end

-- fresh returns the state gen, catch, paused, fired, then the ticks of
-- ARGV[from..] after now, with seen = now.
local function fresh(gen, catch, paused, fired, from)
  local v = {gen, catch, paused, fired, now}
  for i = from, #ARGV do
    local t = tonumber(ARGV[i])
    if t > now then
      v[#v + 1] = t
    end
  end
  return v
end

local v = read()
if op == 'put' then
  local gen, paused, fired = 1, 0, 0
  if v then
    gen, paused, fired = v[1] + 1, v[3], v[4]
  end
  call('HSET', rec, 'c:' .. id, ARGV[5])
  if ARGV[6] == '1' then
    call('HSET', rec, 'p:' .. id, ARGV[7])
  else
    call('HDEL', rec, 'p:' .. id)
  end
  local head = write(fresh(gen, tonumber(ARGV[4]), paused, fired, 8))
  return {head, paused}
end
if not v then
  if op == 'remove' then
    return 0
  end
  return false
end
if op == 'remove' then
  call('ZREM', sched, id)
  call('HDEL', rec, 'c:' .. id, 'p:' .. id, 't:' .. id)
  return 1
elseif op == 'pause' then
  v[3] = 1
  write(v)
  return 1
elseif op == 'resume' then
  if v[3] == 0 then
    return {v[6] or -1, 0}
  end
  if v[1] ~= tonumber(ARGV[4]) then
    return {-2, 1}
  end
  return {write(fresh(v[1], v[2], 0, v[4], 5)), 0}
elseif op == 'refill' then
  local tail = v[#v]
  if #v < 6 then
    tail = v[5]
  end
  if v[1] ~= tonumber(ARGV[4]) or tail ~= tonumber(ARGV[5]) then
    return 0
  end
  local n = 0
  for i = 6, #ARGV do
    local t = tonumber(ARGV[i])
    if t > tail then
      v[#v + 1] = t
      tail = t
      n = n + 1
    end
  end
  if n > 0 then
    write(v)
  end
  return n
end
return redis.error_reply('ERR schedule.lua: unknown op ' .. op)
