-- acquire.lua: the quota's atomic check-then-add (Quota.Acquire).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[2]  shard due index       expset:{name:S}:due
-- KEYS[3]  shard event stream    expset:{name:S}:ev
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  ttl in ms (>= 1)
-- ARGV[3]  member
-- ARGV[4]  owner
-- ARGV[5]  flags (see prelude: e, p, P, v, r)
-- ARGV[6]  limit (>= 1)
-- ARGV[7]  payload, when flags has P
--
-- Reply: {status, count, deadline, retry, evicted...}
--   status    1 added, 2 already held (a retry: no second slot), 0 denied
--   count     live members after the call
--   deadline  the member's deadline in ms (0 when denied)
--   retry     when denied, ms until enough live members expire to make room
--   evicted   with flag v, the members evicted to make room (earliest first)
--
-- The common path (allowed, nothing expired) is TIME, one ZRANGE and one
-- ZADD, plus the key TTL (without events) and an index entry when the owner
-- was empty: the ZRANGE of the first limit+1 members gives the live count,
-- whether the member is there, the earliest deadline and whether anything
-- expired, all at once.
local key, member, owner, flags = KEYS[1], ARGV[3], ARGV[4], ARGV[5]
local now = now_ms(ARGV[1])
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[6])
local events, payloads = has(flags, 'e'), has(flags, 'p')
-- live() is the ZRANGE BYSCORE bound that excludes expired members; only the
-- rare paths need it.
local function live()
  return '(' .. string.format('%d', now)
end

local want = limit
if want > 32 then
  want = 32
end
local r = call('ZRANGE', key, 0, want, 'WITHSCORES')
local more = false
if r[2] and tonumber(r[2]) <= now then
  local _
  _, more = drop(key, KEYS[4], KEYS[3], owner, now, events, payloads, DROP_MAX)
  if more then
    drop_member(key, KEYS[4], KEYS[3], owner, member, now, events, payloads)
    r = call('ZRANGE', key, live(), '+inf', 'BYSCORE', 'LIMIT', 0, want + 1, 'WITHSCORES')
  else
    r = call('ZRANGE', key, 0, want, 'WITHSCORES')
  end
end
-- r now holds live members only, earliest first; whole when it holds them all.
local n = #r / 2
local whole = n <= want
local count = n
if not whole then
  if more then
    count = call('ZCOUNT', key, live(), '+inf')
  else
    count = call('ZCARD', key)
  end
end

local cur
for i = 1, #r, 2 do
  if r[i] == member then
    cur = r[i + 1]
    break
  end
end
if not cur and not whole then
  cur = call('ZSCORE', key, member)
  if cur and tonumber(cur) <= now then
    cur = nil
  end
end

if cur then
  local d = tonumber(cur)
  if has(flags, 'r') then
    d = now + ttl
    call('ZADD', key, d, member)
    -- A refresh may move the deadline earlier than every other: the index
    -- must stay at or before the earliest deadline. r[2] is the earliest
    -- live deadline (r holds live members, earliest first).
    if d < tonumber(r[2]) then
      call('ZADD', KEYS[2], 'LT', d, owner)
    end
    keep_ttl(key, ttl, false, events)
    if has(flags, 'P') then
      put_payload(KEYS[4], member, ARGV[7], ttl, events)
    elseif payloads then
      stretch_payload(KEYS[4], ttl, events)
    end
  end
  return {2, count, d, 0}
end

-- nth returns the deadline and member of the k-th earliest live member.
local function nth(k)
  if 2 * k <= #r then
    return r[2 * k], r[2 * k - 1]
  end
  local x = call('ZRANGE', key, live(), '+inf', 'BYSCORE', 'LIMIT', k - 1, 1, 'WITHSCORES')
  return x[2], x[1]
end

local reply = {1, 0, 0, 0}
local evicted = false
if count >= limit then
  local k = count - limit + 1
  if not has(flags, 'v') then
    local s = nth(k)
    return {0, count, 0, tonumber(s) - now}
  end
  -- Evict the k earliest live members, in batches that unpack safely.
  evicted = true
  while k > 0 do
    local b = k
    if b > DROP_MAX then
      b = DROP_MAX
    end
    local ids = {}
    if b <= n then
      for i = 1, b do
        ids[i] = r[2 * i - 1]
      end
    else
      local x = call('ZRANGE', key, live(), '+inf', 'BYSCORE', 'LIMIT', 0, b)
      for i = 1, #x do
        ids[i] = x[i]
      end
    end
    call('ZREM', key, unpack(ids))
    if payloads then
      call('HDEL', KEYS[4], unpack(ids))
    end
    for i = 1, #ids do
      reply[#reply + 1] = ids[i]
    end
    count = count - #ids
    k = k - #ids
    n = 0 -- r is stale now; later batches read afresh
    r = {}
  end
end

local d = now + ttl
local fresh = count == 0 and not more
call('ZADD', key, d, member)
-- After an eviction r is empty and the earliest remaining deadline unread:
-- ZADD LT lowers the index only when d is earlier than it.
if fresh or evicted or (r[2] and d < tonumber(r[2])) then
  call('ZADD', KEYS[2], 'LT', d, owner)
end
-- d is the latest deadline when the owner was empty or r held every member.
keep_ttl(key, ttl, fresh or (whole and not more and r[#r] ~= nil and d >= tonumber(r[#r])), events)
if has(flags, 'P') then
  put_payload(KEYS[4], member, ARGV[7], ttl, events)
end
reply[2] = count + 1
reply[3] = d
return reply
