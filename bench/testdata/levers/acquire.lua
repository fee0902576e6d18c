-- acquire.lua: the quota's atomic check-then-add (Quota.Acquire).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[2]  shard due index       expset:{name:S}:due   (flag i; else undeclared)
-- KEYS[3]  shard event stream    expset:{name:S}:ev         (flag e or p only)
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>  (flag e or p only)
--          (a set with no flags, see prelude, declares KEYS[1] only)
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
-- The common path (allowed, nothing expired, no flags) is TIME, one ZRANGE
-- and one ZADD, plus PEXPIRE when the new deadline is the owner's latest
-- (without events), and the index ZADD when the owner was empty: the ZRANGE
-- of the first limit+1 members gives the live count, whether the member is
-- there, the earliest and latest deadlines and whether anything expired,
-- all at once. Each redis.call costs about as much as a short script, so
-- the rarer paths build what they need (the live bound, the helpers of
-- lib()) only when they run.
local key, member, owner, flags = KEYS[1], ARGV[3], ARGV[4], ARGV[5]
local now = now_ms(ARGV[1])
local limit = tonumber(ARGV[6])
local flagged = flags ~= ''
local events, payloads, index = false, false, false
if flagged then
  events, payloads, index = has(flags, 'e'), has(flags, 'p'), has(flags, 'i')
end

-- Read the first want+1 members. '0' and ARGV[6] go to Redis as strings: a
-- number argument costs a %.17g formatting.
local want, wantarg = limit, ARGV[6]
if want > 32 then
  want, wantarg = 32, '32'
end
local r = call('ZRANGE', key, '0', wantarg, 'WITHSCORES')
local more = false
local lo -- the ZRANGE BYSCORE bound that excludes expired members: '(now'
if r[2] and tonumber(r[2]) <= now then
  local _
  _, more = lib().drop(key, KEYS[4], KEYS[3], owner, now, events, payloads, DROP_MAX)
  if more then
    lib().drop_member(key, KEYS[4], KEYS[3], owner, member, now, events, payloads)
    lo = '(' .. string.format('%d', now)
    r = call('ZRANGE', key, lo, '+inf', 'BYSCORE', 'LIMIT', 0, want + 1, 'WITHSCORES')
  else
    r = call('ZRANGE', key, '0', wantarg, 'WITHSCORES')
  end
end
-- r now holds live members only, earliest first; whole when it holds them all.
local nr = #r
local n = nr / 2
local whole = n <= want
local count = n
if not whole then
  if more then
    count = call('ZCOUNT', key, lo, '+inf')
  else
    count = call('ZCARD', key)
  end
end

local cur
for i = 1, nr, 2 do
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

local ttl = tonumber(ARGV[2])
if cur then
  local d = tonumber(cur)
  if flagged and has(flags, 'r') then
    d = now + ttl
    call('ZADD', key, d, member)
    -- A refresh may move the deadline earlier than every other: the index
    -- must stay at or before the earliest deadline. r[2] is the earliest
    -- live deadline (r holds live members, earliest first).
    if index and d < tonumber(r[2]) then
      call('ZADD', KEYS[2], 'LT', d, owner)
    end
    keep_ttl(key, ttl, false, events)
    if has(flags, 'P') then
      lib().put_payload(KEYS[4], member, ARGV[7], ttl, events)
    elseif payloads then
      lib().stretch_payload(KEYS[4], ttl, events)
    end
  end
  return {2, count, d, 0}
end

local evicted
if count >= limit then
  local k = count - limit + 1
  if not (flagged and has(flags, 'v')) then
    -- Denied: room comes when the k-th earliest live member expires.
    local s = r[2 * k]
    if not s then
      lo = lo or '(' .. string.format('%d', now)
      s = call('ZRANGE', key, lo, '+inf', 'BYSCORE', 'LIMIT', k - 1, 1, 'WITHSCORES')[2]
    end
    return {0, count, 0, tonumber(s) - now}
  end
  -- Evict the k earliest live members, in batches that unpack safely.
  evicted = {1, 0, 0, 0}
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
      lo = lo or '(' .. string.format('%d', now)
      local x = call('ZRANGE', key, lo, '+inf', 'BYSCORE', 'LIMIT', 0, b)
      for i = 1, #x do
        ids[i] = x[i]
      end
    end
    call('ZREM', key, unpack(ids))
    if payloads then
      call('HDEL', KEYS[4], unpack(ids))
    end
    for i = 1, #ids do
      evicted[#evicted + 1] = ids[i]
    end
    count = count - #ids
    k = k - #ids
    n = 0 -- r is stale now; later batches read afresh
    r = {}
    nr = 0
  end
end

local d = now + ttl
-- Formatted once with %d (exact below 2^53), not twice with %.17g.
local ds = string.format('%d', d)
local fresh = count == 0 and not more
call('ZADD', key, ds, member)
-- After an eviction r is stale and the earliest remaining deadline unread:
-- ZADD LT lowers the index only when d is earlier than it.
if index and (fresh or evicted or (r[2] and d < tonumber(r[2]))) then
  call('ZADD', KEYS[2], 'LT', ds, owner)
end
if not events then
  if fresh then
    call('PEXPIRE', key, ARGV[2])
  elseif whole and not more and nr > 0 then
    -- r held every member: the key's TTL already reaches r's latest
    -- deadline, so only a later one needs a PEXPIRE, and no GT.
    if d > tonumber(r[nr]) then
      call('PEXPIRE', key, ARGV[2])
    end
  else
    call('PEXPIRE', key, ARGV[2], 'GT')
  end
end
if flagged and has(flags, 'P') then
  lib().put_payload(KEYS[4], member, ARGV[7], ttl, events)
end
if evicted then
  evicted[2], evicted[3] = count + 1, d
  return evicted
end
return {1, count + 1, d, 0}
