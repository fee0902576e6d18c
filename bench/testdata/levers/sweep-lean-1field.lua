-- sweep-lean-1field.lua: sweep-lean.lua writing each event as one field,
-- "e" = owner, member and deadline joined by newlines, instead of three. Same
-- KEYS, ARGV and reply as lua/sweep.lua (this copy refuses flag p).
--
-- Per owner, lua/sweep.lua makes: ZRANGE BYSCORE (the expired members),
-- XADD per member (events), ZREMRANGEBYRANK, ZRANGE 0 0 (the earliest
-- remaining deadline), and ZADD or ZREM on the index. This copy reads the
-- owner's first PEEK+1 members by rank once: the expired ones and, after
-- them, the earliest live deadline, so one read serves the drop and the
-- re-filing. It re-files every owner of the round with one ZADD and takes
-- the emptied ones out with one ZREM at the end. An owner with more than
-- PEEK expired members falls back to the by-score read. Every argument to
-- redis.call is a string (a number costs a %.17g formatting) and every
-- deadline is converted to a number once.
local call = redis.call
local due, stream, flags = KEYS[1], KEYS[2], ARGV[2]
local now
if ARGV[1] == '' then
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
else
  now = tonumber(ARGV[1])
end
local ARGNOW = string.format('%d', now)
local budget = tonumber(ARGV[3])
local batch = tonumber(ARGV[4])
local events = string.find(flags, 'e', 1, true) ~= nil
if string.find(flags, 'p', 1, true) then
  return redis.error_reply('ERR sweep-lean.lua: payloads are not in this copy')
end
local n = #ARGV - 4
local PEEK = 2
-- Rank bounds as strings: a number argument to redis.call costs a %.17g
-- formatting.
local RANK = {'0', '1', '2'}

local expired, late_sum, late_max, owners, stale = 0, 0, 0, 0, 0
local gone, refile = {}, {}
local ds = {} -- an owner's expired deadlines as numbers, converted once
for i = 1, n do
  if budget <= 0 then
    break
  end
  local key, owner = KEYS[2 + i], ARGV[4 + i]
  local want = PEEK
  if want > budget then
    want = budget
  end
  local r = call('ZRANGE', key, '0', RANK[want + 1] or string.format('%d', want), 'WITHSCORES')
  local nr = #r
  local k = 0
  while 2 * k < nr do
    local d = tonumber(r[2 * k + 2])
    if d > now then
      break
    end
    k = k + 1
    ds[k] = d
  end
  local first -- the owner's earliest deadline after the drop
  local known = true -- first is known without another read
  if k > want then
    if want == budget then
      -- The budget ends here: drop want, leave the owner due at its next
      -- (expired) deadline.
      k = want
      first = r[2 * k + 2]
    else
      -- More than PEEK expired: read them within the budget.
      r = call('ZRANGE', key, '-inf', ARGNOW, 'BYSCORE', 'LIMIT', '0', string.format('%d', budget), 'WITHSCORES')
      k = #r / 2
      for j = 1, k do
        ds[j] = tonumber(r[2 * j])
      end
      known = false
    end
  else
    first = r[2 * k + 2] -- nil when every member was expired
  end
  if k > 0 then
    for j = 1, k do
      local d = r[2 * j]
      local late = now - ds[j]
      late_sum = late_sum + late
      if late > late_max then
        late_max = late
      end
      if events then
        call('XADD', stream, '*', 'e', owner .. '\n' .. r[2 * j - 1] .. '\n' .. d)
      end
    end
    call('ZREMRANGEBYRANK', key, '0', RANK[k] or string.format('%d', k - 1))
    budget = budget - k
    expired = expired + k
    owners = owners + 1
  else
    stale = stale + 1
  end
  if not known then
    first = call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
  end
  if first then
    refile[#refile + 1] = first
    refile[#refile + 1] = owner
  else
    gone[#gone + 1] = owner
  end
end
if #gone > 0 then
  call('ZREM', due, unpack(gone))
end
if #refile > 0 then
  call('ZADD', due, unpack(refile))
end

local head = call('ZRANGE', due, 0, 0, 'WITHSCORES')
local earliest = -1
if head[2] then
  earliest = tonumber(head[2])
end
local reply = {now, expired, late_sum, late_max, owners, stale, earliest}
local next = call('ZRANGE', due, '-inf', ARGNOW, 'BYSCORE', 'LIMIT', '0', ARGV[4])
for i = 1, #next do
  reply[#reply + 1] = next[i]
end
return reply
