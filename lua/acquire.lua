-- acquire.lua: the quota's atomic check-then-add (Quota.Acquire).
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
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  ttl in ms (>= 1)
-- ARGV[3]  member
-- ARGV[4]  owner
-- ARGV[5]  flags (see prelude: e, p, P, v, r)
-- ARGV[6]  limit (>= 1)
-- ARGV[7]  payload, when flags has P ("" otherwise, when flag v)
-- ARGV[8]  with flag v: how long the receipt lasts, in ms (>= 1)
-- ARGV[#ARGV-1], ARGV[#ARGV]  with flag w (a waiter): its ticket, its lease in ms
--
-- Reply: {status, count, deadline, retry, evicted...}
--   status    1 added, 2 already held (a retry: no second slot), 0 denied
--   count     live members after the call
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
-- A waiter (flag w) that is not admitted gets {3, count, rank, retry}: its
-- rank in the line, and (meaningful at rank 0) when to try again.
--
-- The common path (allowed, nothing expired, no flags) is TIME, one ZRANGE
-- and one ZADD, plus PEXPIRE when the new deadline is the owner's latest
-- (without events), and the index filing when the owner was empty (a ZADD;
-- without events also a ZRANGE of stale entries and a PEXPIRE): the ZRANGE
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

local ttl = tonumber(ARGV[2])
if cur then
  local d = tonumber(cur)
  local receipt
  if flagged and has(flags, 'v') then
    receipt = call('LRANGE', KEYS[5], 0, -1)
    if not (receipt[2] and tonumber(receipt[1]) == d and now < tonumber(receipt[2])) then
      receipt = nil
    end
  end
  if flagged and has(flags, 'r') then
    d = now + ttl
    call('ZADD', key, d, member)
    -- A refresh may move the deadline earlier than every other: the index
    -- must stay at or before the earliest deadline. r[2] is the earliest
    -- live deadline (r holds live members, earliest first).
    if index and d < tonumber(r[2]) then
      file_owner(KEYS[2], owner, d, ttl, now, events)
    end
    keep_ttl(key, ttl, false, events)
    if has(flags, 'P') then
      lib().put_payload(KEYS[4], member, ARGV[7], ttl, events)
    elseif payloads then
      lib().stretch_payload(KEYS[4], ttl, events)
    end
    if receipt then
      call('LSET', KEYS[5], 0, string.format('%d', d))
    end
  end
  local reply = {2, count, d, 0}
  if receipt then
    for i = 3, #receipt do
      reply[i + 2] = receipt[i]
    end
  end
  return reply
end

-- The wait line (wait_gate.lua) has the first claim on free slots: a waiter
-- passes its gate, and so does any other admission while a line exists
-- (one EXISTS when nobody waits). Evicting quotas never wait.
local waiter = flagged and has(flags, 'w')
local queued
if not (flagged and has(flags, 'v')) and (waiter or (count < limit and call('EXISTS', KEYS[#KEYS]) == 1)) then
  queued = waitlib().gate(KEYS[#KEYS], KEYS[#KEYS - 1], waiter and ARGV[#ARGV - 1], ARGV[#ARGV], count, limit, now)
end

local evicted
if count >= limit or queued then
  local k = count - limit + 1
  if not (flagged and has(flags, 'v')) then
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
  n, r, nr = 0, {}, 0 -- r is stale now
end

local d = now + ttl
-- Formatted once with %d (exact below 2^53), not twice with %.17g.
local ds = string.format('%d', d)
local fresh = count == 0 and not more
call('ZADD', key, ds, member)
-- After an eviction r is stale and the earliest remaining deadline unread:
-- ZADD LT lowers the index only when d is earlier than it.
if index and (fresh or evicted or (r[2] and d < tonumber(r[2]))) then
  file_owner(KEYS[2], owner, ds, ttl, now, events)
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
  call('DEL', KEYS[5])
  call('RPUSH', KEYS[5], ds, string.format('%d', now + tonumber(ARGV[8])), unpack(evicted, 5))
  call('PEXPIRE', KEYS[5], ARGV[8])
  return evicted
end
return {1, count + 1, d, 0}
