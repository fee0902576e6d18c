-- acquire_plain.lua: Quota.Acquire's common call, with the server's clock
-- and no option of the call but WithEvictOldest, on a set without flags or
-- with expiry events alone (no payloads), built by Store.plainCall. It
-- decides as acquire.lua does, in the shape of the straightforward
-- check-then-add, with no shared function (a closure costs every run about
-- 1.5k instructions, measured: the filing in the due index is written out,
-- as in put.lua and reschedule.lua); a call it does not finish (a wait line
-- to respect, more expired members than one call may drop, or with events
-- any expired member, whose event the sweeper or acquire.lua writes; an
-- eviction of more than MAX_BATCH members, or any with events; a receipt
-- of the list form acquire.lua wrote before the string form) changes
-- nothing and replies -1, and the caller then runs acquire.lua.
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[2]  owner's wait line     expset:{name:S}:w:<owner>; with ARGV[4]
--          (an evicting quota, which never waits) the eviction receipt
--          expset:{name:S}:r:<len(owner)>:<owner><member> instead
-- KEYS[3]  shard due index       expset:{name:S}:due (with events only); the
--          owner (its member) is KEYS[1]'s tail from the position #KEYS[3]
--          ("o:" is one byte shorter than "due")
-- ARGV[1]  ttl in ms (>= 1)
-- ARGV[2]  member
-- ARGV[3]  limit (>= 1)
-- ARGV[4]  WithEvictOldest: how long an eviction receipt lasts, in ms (>= 1)
--
-- Reply: acquire.lua's decision (value * 256 + count * 4 + status when
-- count < 64 and value < 2^45, else the table), or -1: run acquire.lua.
-- With ARGV[4], at the limit the earliest live members are evicted to make
-- room, as acquire.lua's flag v does. The receipt, the string "<deadline>
-- <expires>" and " <length>:<member>" per member evicted, lives ARGV[4] ms
-- (SET PX: one command), so that a retry (the member held at that very
-- deadline, before expires) reports the same members. Both reply "1
-- <count> " (the retry "2 <count> ") and the receipt: text, which costs the
-- server less than a table.
-- Where acquire.lua's integer cannot hold the count, and the value is
-- below 2^45, it is a denial's retry * 2^22 + count * 4 + 3 (count < 2^20,
-- retry < 2^31 ms) or the string "status count value": each costs the
-- server less than the table (bench/README.md).
--
-- The calls: TIME, ZCARD and (of an owner with members) the member's
-- ZSCORE, or from a limit of 1000 ZSCORE first and ZCARD only when the
-- member is not held (held and live: answered with the live members
-- counted, ZCARD less a ZCOUNT of the expired, or from 1000 one ZCOUNT of
-- the live); at or past the limit, the member at
-- rank count - limit, whose deadline is a denial's retry; else ZCOUNT of
-- the expired (without events dropped with one ZREMRANGEBYRANK: the
-- earliest are the expired), EXISTS of the wait line and ZADD; then
-- without events PEXPIRE (GT but on an owner's first member) to the end of
-- the new deadline's TTL_BUCKET, with events ZADD LT CH of the owner in
-- the due index (it stays at or before the owner's earliest deadline) and,
-- when that moved it, the owner's rank read back (ZRANK: an integer, where
-- the head's name would be a table): when the owner is the head, the
-- deadline is published on KEYS[3] .. ':wake' (notify.go). With ARGV[4]:
-- a retry's GET of the receipt; no EXISTS; at the limit, instead of a
-- denial, the members to evict are those at ranks e to count - limit, the
-- e expired before them: the one at count - limit, read already, when e is
-- count - limit (always when it is 0), else a ZRANGE after the ZCOUNT of
-- the expired; one ZREMRANGEBYRANK takes the expired and the evicted, and
-- the receipt is a SET after the ZADD and PEXPIRE.
local K, A = KEYS, ARGV
local key, member, due, rttl = K[1], A[2], K[3], A[4]
local t = call('TIME')
local us = t[2] + 0
local now = t[1] * 1000 + (us - us % 1000) / 1000
local nows -- now formatted, when a ZCOUNT needs it
local status, count, value -- the decision: 2 held, 0 denied, 1 added
-- Below a limit of 1000 the owner's ZCARD comes first, and an owner
-- without members (its first acquire) needs no ZSCORE; from 1000 the
-- member's ZSCORE does, and a retry then needs no ZCARD.
local big = #A[3] > 3
local n, cur
if big then
  cur = call('ZSCORE', key, member)
else
  n = call('ZCARD', key)
  if n > 0 then
    cur = call('ZSCORE', key, member)
  end
end
cur = cur and cur + 0
if cur and cur > now then
  -- The live members: one ZCOUNT of them from a limit of 1000, where an
  -- owner near its limit is a skip list (O(log n)); below it ZCARD less a
  -- ZCOUNT of the expired, constant-time also in a listpack, which a
  -- ZCOUNT of the live walks.
  if big then
    count = call('ZCOUNT', key, string.format('(%d', now), '+inf')
  else
    count = n - call('ZCOUNT', key, '-inf', string.format('%d', now))
  end
  status, value = 2, cur
  if rttl then
    -- A retry reports what its admission evicted while the receipt lasts.
    local rc = redis.pcall('GET', K[2])
    if type(rc) == 'table' then
      return -1 -- an error: a receipt of the list form
    end
    if rc then
      local find, sub = string.find, string.sub
      local a = find(rc, ' ', 1, true)
      local b = find(rc, ' ', a + 1, true)
      if b and tonumber(sub(rc, 1, a - 1)) == cur and now < tonumber(sub(rc, a + 1, b - 1)) then
        return string.format('2 %d ', count) .. rc
      end
    end
  end
else
  n = n or call('ZCARD', key)
  local e = 0 -- expired members (and with an eviction those evicted): the earliest e
  local evicted -- with ARGV[4] at the limit: the members evicted, earliest first
  if n > 0 then
    local over = n - A[3]
    if over >= 0 then
      -- The member at rank n - limit is the k-th earliest live one that a
      -- denial waits for (k = live - limit + 1: the expired come first),
      -- and when it is live the owner is at its limit.
      local r = '0'
      if over > 0 then
        r = string.format('%d', over)
      end
      local x = call('ZRANGE', key, r, r, 'WITHSCORES')
      local retry = x[2] - now
      if retry > 0 and rttl then
        -- At the limit, evicting: the members at ranks e to over (the
        -- expired come first) are the over - e + 1 earliest live ones; the
        -- ZREMRANGEBYRANK below takes them with the expired.
        if due then
          return -1 -- their events are acquire.lua's
        end
        if over > 0 then
          nows = string.format('%d', now)
          e = call('ZCOUNT', key, '-inf', nows)
        end
        if over - e >= MAX_BATCH or e > MAX_BATCH then
          return -1
        end
        if e == over then
          evicted = {x[1]}
        else
          evicted = call('ZRANGE', key, string.format('%d', e), r)
        end
        e = over + 1
      elseif retry > 0 then
        status, count, value = 0, n, retry
        if over > 0 then
          nows = string.format('%d', now)
          count = n - call('ZCOUNT', key, '-inf', nows)
        end
      end
    end
    if not status and not evicted then
      e = call('ZCOUNT', key, '-inf', nows or string.format('%d', now))
      if e > MAX_BATCH or (due and e > 0) then
        return -1
      end
    end
  end
  if not status then
    if not rttl and call('EXISTS', K[2]) == 1 then
      return -1
    end
    if e > 0 then
      call('ZREMRANGEBYRANK', key, '0', e - 1)
      n = n - e
    end
    local d = now + A[1]
    local ds = string.format('%d', d)
    call('ZADD', key, ds, member)
    if due then
      local owner = string.sub(key, #due)
      if call('ZADD', due, 'LT', 'CH', ds, owner) == 1 and call('ZRANK', due, owner) == 0 then
        local ch = due .. ':wake'
        local ok = redis.pcall('SPUBLISH', ch, ds)
        if type(ok) == 'table' and ok.err then
          call('PUBLISH', ch, ds)
        end
      end
    else
      local left = string.format('%d', (d - d % TTL_BUCKET) + TTL_BUCKET - now)
      if n == 0 then
        call('PEXPIRE', key, left)
      else
        call('PEXPIRE', key, left, 'GT')
      end
    end
    status, count, value = 1, n + 1, d
    if evicted then
      local rc = ds .. ' ' .. string.format('%d', now + rttl)
      if #evicted == 1 then
        rc = rc .. ' ' .. #evicted[1] .. ':' .. evicted[1]
      else -- one concat: a concatenation per member would copy the receipt once each
        local parts = {rc}
        for i = 1, #evicted do
          parts[#parts + 1] = ' ' .. #evicted[i] .. ':' .. evicted[i]
        end
        rc = table.concat(parts)
      end
      call('SET', K[2], rc, 'PX', rttl)
      return string.format('1 %d ', n + 1) .. rc
    end
  end
end
if value < 35184372088832 then
  if count < 64 then
    return value * 256 + count * 4 + status
  end
  if status == 0 and value < 2147483648 and count < 1048576 then
    return value * 4194304 + count * 4 + 3
  end
  return string.format('%d %d %d', status, count, value)
end
if status == 0 then
  return {0, count, 0, value}
end
return {status, count, value, 0}
