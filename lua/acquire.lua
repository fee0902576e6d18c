-- acquire.lua: the quota's atomic check-then-add (Quota.Acquire). A lean
-- script (see prelude): loaded without the prelude's helpers.
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[2]  shard due index       expset:{name:S}:due   (flag i; else undeclared)
-- KEYS[3]  shard event stream    expset:{name:S}:ev         (flag e or p only)
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>  (flag e or p only)
-- KEYS[5]  eviction receipt      expset:{name:S}:r:<len(owner)>:<owner><member>
--                                (flag v only)
--          (a set with no flags, see prelude, declares KEYS[1] only, or
--          with flag v KEYS[1..5])
-- KEYS[#KEYS-1]  owner's ticket leases  expset:{name:S}:wl:<owner>  (flag w only)
-- KEYS[#KEYS]    owner's wait line      expset:{name:S}:w:<owner>   (last; not with flag v)
-- ARGV[1]  ttl in ms (>= 1)
-- ARGV[2]  member
-- ARGV[3]  limit (>= 1)
-- The common call (no flags, the server's clock) sends those three; #ARGV
-- says whether the rest follow:
-- ARGV[4]  flags (see prelude: e, i, p, P, v, r, w)
-- ARGV[5]  now in ms, or "" for the server's TIME
-- ARGV[6]  owner
-- ARGV[7]  payload, when flags has P ("" otherwise, when flag v)
-- ARGV[8]  with flag v: how long the receipt lasts, in ms (>= 1)
-- ARGV[#ARGV-1], ARGV[#ARGV]  with flag w (a waiter): its ticket, its lease in ms
--
-- Reply: one integer, value * 256 + count * 4 + status, when count < 64,
-- nothing was evicted and value < 2^45 (exact in a double); else a table
-- {status, count, deadline, retry, evicted...}:
--   status    1 added, 2 already held (a retry: no second slot), 0 denied
--   count     live members after the call
--   value     the member's deadline in ms when added or held, the retry
--             when denied
--   deadline  the member's deadline in ms (0 when denied)
--   retry     when denied, ms until enough live members expire to make room
--             (0 after a partial eviction: call again)
--   evicted   with flag v, the members evicted to make room (earliest
--             first); for an already held member, those its admission
--             evicted, while its receipt lasts
--
-- Eviction (flag v): the evicted members go with their payloads; with
-- events each gets one stream entry with r=evicted. The admission that
-- evicted writes a receipt, a list {deadline, expires, evicted...} that
-- lives ARGV[8] ms, so that a retry of it (the member held at that very
-- deadline, before expires) reports the same members. Only an eviction
-- writes it. When more members must go than one call may move (MAX_BATCH,
-- BYTES_MAX), the call evicts what it may and denies with retry 0.
-- A waiter (flag w) that is not admitted gets the table {3, count, rank,
-- retry}: its rank in the line, and (meaningful at rank 0) when to try
-- again.
--
-- The common path (allowed, nothing expired, no flags) is TIME, one ZRANGE,
-- an EXISTS of the wait line and one ZADD, plus a PEXPIRE when the new
-- deadline ends in a later TTL_BUCKET than the owner's latest (without
-- events), and with the due index a ZADD when the owner was empty or the new
-- deadline is its earliest: the ZRANGE of the first limit+1 members gives the
-- live count, whether the member is there, the earliest and latest deadlines
-- and whether anything expired, all at once. Each redis.call costs about as
-- much as a short script, so the rarer paths build what they need (the live
-- bound, the helpers of lib()) only when they run.
local key, member, limarg = KEYS[1], ARGV[2], ARGV[3]
local flags = ARGV[4]
local now
local flagged, events, payloads, index, evict, waiter = false, false, false, false, false, false
if flags then
  if ARGV[5] ~= '' then
    now = tonumber(ARGV[5])
  end
  if flags ~= '' then
    local find = string.find
    flagged = true
    events = find(flags, 'e', 1, true) ~= nil
    payloads = find(flags, 'p', 1, true) ~= nil
    index = find(flags, 'i', 1, true) ~= nil
    evict = find(flags, 'v', 1, true) ~= nil
    waiter = find(flags, 'w', 1, true) ~= nil
  end
end
if not now then
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
local owner = ARGV[6]
local limit = tonumber(limarg)

-- Read the first want+1 members. '0' and ARGV[3] go to Redis as strings: a
-- number argument costs a %.17g formatting.
local want, wantarg = limit, limarg
if want > 32 then
  want, wantarg = 32, '32'
end
local r = call('ZRANGE', key, '0', wantarg, 'WITHSCORES')
local more = false
local used = 0 -- bytes moved (see BYTES_MAX)
local lo -- the ZRANGE BYSCORE bound that excludes expired members: '(now'
if r[2] and tonumber(r[2]) <= now then
  local _
  _, more, _, _, used = lib().drop(key, KEYS[4], KEYS[3], owner, now, events, payloads, MAX_BATCH)
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

local ttl = tonumber(ARGV[1])
if cur then
  local d = tonumber(cur)
  local receipt
  if evict then
    receipt = call('LRANGE', KEYS[5], 0, -1)
    if not (receipt[2] and tonumber(receipt[1]) == d and now < tonumber(receipt[2])) then
      receipt = nil
    end
  end
  if flagged and string.find(flags, 'r', 1, true) then
    local old = d
    d = now + ttl
    call('ZADD', key, d, member)
    -- A refresh may move the deadline earlier than every other: the index
    -- must stay at or before the earliest deadline. r[2] is the earliest
    -- live deadline (r holds live members, earliest first).
    if index and d < tonumber(r[2]) then
      lib().file_owner(KEYS[2], owner, d, ttl, now, events)
    end
    -- The key's TTL reaches the end of old's bucket already.
    local b = math.floor(d / TTL_BUCKET)
    if not events and b > math.floor(old / TTL_BUCKET) then
      call('PEXPIRE', key, string.format('%d', (b + 1) * TTL_BUCKET - now), 'GT')
    end
    if string.find(flags, 'P', 1, true) then
      lib().put_payload(KEYS[4], member, ARGV[7], ttl, events)
    elseif payloads then
      lib().stretch_payload(KEYS[4], ttl, events)
    end
    if receipt then
      call('LSET', KEYS[5], 0, string.format('%d', d))
    end
  end
  if receipt then
    local reply = {2, count, d, 0}
    for i = 3, #receipt do
      reply[i + 2] = receipt[i]
    end
    return reply
  end
  if count < 64 and d < 35184372088832 then
    return d * 256 + count * 4 + 2
  end
  return {2, count, d, 0}
end

-- The wait line (wait_gate.lua) has the first claim on free slots: a waiter
-- passes its gate, and so does any other admission while a line exists
-- (one EXISTS when nobody waits). Evicting quotas never wait.
local queued
if not evict and (waiter or (count < limit and call('EXISTS', KEYS[#KEYS]) == 1)) then
  queued = waitlib().gate(KEYS[#KEYS], KEYS[#KEYS - 1], waiter and ARGV[#ARGV - 1], ARGV[#ARGV], count, limit, now)
end

local evicted
if count >= limit or queued then
  local k = count - limit + 1
  if not evict then
    -- Denied: room comes when the k-th earliest live member expires (the
    -- earliest when the line holds the free slots; 1s when none is live).
    if k < 1 then
      k = 1
    end
    local s = r[2 * k]
    if not s and count > 0 then
      lo = lo or '(' .. string.format('%d', now)
      s = call('ZRANGE', key, lo, '+inf', 'BYSCORE', 'LIMIT', k - 1, 1, 'WITHSCORES')[2]
    end
    local retry = 1000
    if s then
      retry = tonumber(s) - now
    end
    if waiter then
      return {3, count, queued, retry}
    end
    if count < 64 and retry < 35184372088832 then
      return retry * 256 + count * 4
    end
    return {0, count, 0, retry}
  end
  -- Evict the k earliest live members, or as many of them as one call
  -- may move.
  local b = k
  if b > MAX_BATCH then
    b = MAX_BATCH
  end
  local ids, eds = {}, {}
  if b <= n then
    for i = 1, b do
      ids[i], eds[i] = r[2 * i - 1], r[2 * i]
    end
  else
    lo = lo or '(' .. string.format('%d', now)
    local x = call('ZRANGE', key, lo, '+inf', 'BYSCORE', 'LIMIT', 0, b, 'WITHSCORES')
    for i = 1, #x / 2 do
      ids[i], eds[i] = x[2 * i - 1], x[2 * i]
    end
  end
  if events or payloads then
    b = lib().fit(KEYS[4], owner, ids, b, events, payloads, BYTES_MAX - used)
  end
  lib().evict(key, KEYS[4], KEYS[3], owner, ids, eds, b, events, payloads)
  count = count - b
  evicted = {1, 0, 0, 0}
  for i = 1, b do
    evicted[4 + i] = ids[i]
  end
  if b < k then
    evicted[1], evicted[2] = 0, count
    return evicted
  end
end

local d = now + ttl
-- Formatted once with %d (exact below 2^53), not with %.17g per use.
local ds = string.format('%d', d)
local fresh = count == 0 and not more
call('ZADD', key, ds, member)
if index then
  -- After an eviction r is stale and the earliest remaining deadline
  -- unread: ZADD LT lowers the index only when d is earlier than it.
  if fresh or evicted or (r[2] and d < tonumber(r[2])) then
    if events then
      call('ZADD', KEYS[2], 'LT', ds, owner)
    else
      lib().file_owner(KEYS[2], owner, ds, ttl, now, events)
    end
  end
end
if not events then
  -- The key's TTL reaches the end of its latest deadline's bucket (see
  -- TTL_BUCKET). When r held every member (and nothing was evicted), its
  -- last is the latest: only a later bucket needs a PEXPIRE, and no GT.
  local b = math.floor(d / TTL_BUCKET)
  local left = string.format('%d', (b + 1) * TTL_BUCKET - now)
  if fresh then
    call('PEXPIRE', key, left)
  elseif whole and not more and not evicted then
    if b > math.floor(tonumber(r[nr]) / TTL_BUCKET) then
      call('PEXPIRE', key, left)
    end
  else
    call('PEXPIRE', key, left, 'GT')
  end
end
if flagged and string.find(flags, 'P', 1, true) then
  lib().put_payload(KEYS[4], member, ARGV[7], ttl, events)
end
if evicted then
  evicted[2], evicted[3] = count + 1, d
  call('DEL', KEYS[5])
  call('RPUSH', KEYS[5], ds, string.format('%d', now + tonumber(ARGV[8])), unpack(evicted, 5))
  call('PEXPIRE', KEYS[5], ARGV[8])
  return evicted
end
if count < 63 and d < 35184372088832 then
  return d * 256 + (count + 1) * 4 + 1
end
return {1, count + 1, d, 0}
