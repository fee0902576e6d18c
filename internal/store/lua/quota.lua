-- quota.lua: admit, the quota's admission of one request, shared by
-- acquire.lua (one request per call) and acquire_many.lua (the requests of
-- one shard in one call). Shared code, not a script: scripts.go places it
-- after prelude.lua and wait_gate.lua.
--
-- admit(keys, ko, nk, argv, ao, na, now, lib, waitlib, TTL_BUCKET,
-- MAX_BATCH, BYTES_MAX) reads keys[ko + 1 .. ko + nk] and argv[ao + 1 .. ao
-- + na], which are what acquire.lua's header names KEYS and ARGV
-- (acquire_many.lua passes its own KEYS and ARGV with offsets, building no
-- table per request); now is the time in ms, or nil to take it from argv (or
-- the server's TIME). The prelude's helpers and constants come as arguments:
-- as upvalues they would cost every run about 0.5k instructions each. It
-- returns acquire.lua's reply, then the bytes (see BYTES_MAX) and the
-- members (expired members dropped, members evicted) it moved.
--
-- What the decision reads: below a limit of 10, the two earliest members
-- (whether any expired; the earliest live deadline, which a denial's retry
-- and an eviction need; the whole set when it holds at most one), ZCARD when
-- there are more, and whether the member is held: r says so when it holds
-- it, else an admission with a free slot and no wait line adds it with ZADD
-- NX (which leaves a held member alone and says so), and any other call
-- reads ZSCORE. From a limit of 10, the member's ZSCORE first (a held
-- member is answered with a ZCOUNT of the live members), then the earliest
-- member and ZCARD. So its cost follows the work, not the limit
-- (bench/README.md has the figures at limits 1 to 10,000).
local function admit(keys, ko, nk, argv, ao, na, now, lib, waitlib, TTL_BUCKET, MAX_BATCH, BYTES_MAX)
  local call = redis.call -- a local, not the prelude's: an upvalue costs every run
  local admit_used, admit_moved = 0, 0
  local key, member, limarg = keys[ko + 1], argv[ao + 2], argv[ao + 3]
  local flags
  if na > 3 then
    flags = argv[ao + 4]
  end
  local flagged, events, payloads, index, evict, waiter = false, false, false, false, false, false
  if flags then
    if not now and argv[ao + 5] ~= '' then
      now = tonumber(argv[ao + 5])
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
  local owner = argv[ao + 6]
  local ttl, d, ds -- the new deadline (d = now + ttl, ds formatted once with %d), read when needed

  -- An owner allowed 10 members or more (limarg, sent without leading
  -- zeros, has two digits or more: no tonumber, which costs a strtod) may
  -- hold more than the two that the first read below returns, so the call
  -- reads the member's own score first: a held member (a retry) is then
  -- answered with one ZCOUNT of the live members, whatever the owner holds,
  -- and a member not held needs only the earliest member read. Below it,
  -- reading the two earliest members tells everything at once for an owner
  -- holding at most one.
  local probed = #limarg > 1
  local cur, curn -- the member's deadline, when held and live: as read, as a number
  if probed then
    cur = call('ZSCORE', key, member)
    if cur then
      curn = tonumber(cur)
      if curn <= now then
        cur, curn = nil, nil
      elseif not evict and not (flagged and string.find(flags, 'r', 1, true)) then
        local count = call('ZCOUNT', key, '(' .. string.format('%d', now), '+inf')
        if count < 64 and curn < 35184372088832 then
          return curn * 256 + count * 4 + 2, 0, 0
        end
        return {2, count, curn, 0}, 0, 0
      end
    end
  end

  -- Read the earliest members (two, or one when probed), whatever the
  -- limit: the earliest tells whether anything expired and, live, when a
  -- denied call may retry (or whom an eviction takes); an owner with fewer
  -- than were asked for needs no other read. '0' and '1' go to Redis as
  -- strings: a number argument costs a %.17g formatting.
  local last, want = '1', 2
  if probed then
    last, want = '0', 1
  end
  local r = call('ZRANGE', key, '0', last, 'WITHSCORES')
  local more = false
  local used = 0 -- bytes moved (see BYTES_MAX)
  local lo -- the ZRANGE BYSCORE bound that excludes expired members: '(now'
  local early = r[2] and tonumber(r[2]) -- the earliest deadline read
  if early and early <= now then
    local dropped, _
    dropped, more, _, _, used = lib().drop(key, keys[ko + 4], keys[ko + 3], owner, now, events, payloads, MAX_BATCH, false, BYTES_MAX)
    admit_used, admit_moved = used, dropped
    if more then
      lib().drop_member(key, keys[ko + 4], keys[ko + 3], owner, member, now, events, payloads)
      lo = '(' .. string.format('%d', now)
      r = call('ZRANGE', key, lo, '+inf', 'BYSCORE', 'LIMIT', '0', want, 'WITHSCORES')
    else
      r = call('ZRANGE', key, '0', last, 'WITHSCORES')
    end
    early = r[2] and tonumber(r[2])
  end
  -- r now holds live members only, earliest first; whole when it holds them
  -- all (fewer than were asked for).
  local nr = #r
  local n = nr / 2
  local whole = n < want
  local count = n
  if not whole then
    if more then
      count = call('ZCOUNT', key, lo, '+inf')
    else
      count = call('ZCARD', key)
    end
  end
  -- The limit as a number (a tonumber costs a strtod): with no live member
  -- every limit (>= 1) compares alike, so an empty owner skips it (the wait
  -- line's gate below parses its own).
  local limit = 1
  if count > 0 then
    limit = tonumber(limarg)
  end

  if not probed then
    for i = 1, nr, 2 do
      if r[i] == member then
        cur = r[i + 1]
        if i == 1 then
          curn = early
        end
        break
      end
    end
  end
  -- Whether member is held, when neither the probe nor r says: an
  -- admission that has a free slot and no wait line to respect adds it with
  -- NX, which leaves a held member alone and says so; any other call reads
  -- its score.
  local line -- the wait line's EXISTS, when read (1 or 0)
  local added = false
  if not cur and not whole and not probed then
    if count < limit and not evict and not waiter then
      line = call('EXISTS', keys[ko + nk])
    end
    if line == 0 then
      ttl = tonumber(argv[ao + 1])
      d = now + ttl
      ds = string.format('%d', d)
      added = call('ZADD', key, 'NX', ds, member) == 1
    end
    if not added then
      cur = call('ZSCORE', key, member)
      if cur and tonumber(cur) <= now then
        cur = nil
      end
    end
  end

  if cur then
    local d = curn or tonumber(cur)
    local receipt, rc
    if evict then
      rc = redis.pcall('GET', keys[ko + 5])
      if type(rc) == 'table' then -- an error: the list form {deadline, expires, evicted...}
        receipt, rc = call('LRANGE', keys[ko + 5], '0', '-1'), nil
      elseif rc then -- "<deadline> <expires>", then " <length>:<member>" per member evicted
        local find, sub = string.find, string.sub
        local a = find(rc, ' ', 1, true)
        local b = find(rc, ' ', a + 1, true)
        receipt = {sub(rc, 1, a - 1), sub(rc, a + 1, (b or 0) - 1)}
        while b and b < #rc do
          local c = find(rc, ':', b + 1, true)
          local e = c + tonumber(sub(rc, b + 1, c - 1))
          receipt[#receipt + 1] = sub(rc, c + 1, e)
          b = e + 1
        end
        rc = sub(rc, a) -- what follows the deadline: a refresh keeps it
      end
      if not (receipt and receipt[2] and tonumber(receipt[1]) == d and now < tonumber(receipt[2])) then
        receipt = nil
      end
    end
    if flagged and string.find(flags, 'r', 1, true) then
      local old = d
      ttl = tonumber(argv[ao + 1])
      d = now + ttl
      call('ZADD', key, d, member)
      -- A refresh may move the deadline earlier than every other: the index
      -- must stay at or before the earliest deadline. early is the earliest
      -- live deadline (r holds live members, earliest first).
      if index and d < early then
        lib().file_owner(keys[ko + 2], owner, d, ttl, now, events)
      end
      -- The key's TTL reaches the end of old's bucket already.
      local b = math.floor(d / TTL_BUCKET)
      if not events and b > math.floor(old / TTL_BUCKET) then
        call('PEXPIRE', key, string.format('%d', (b + 1) * TTL_BUCKET - now), 'GT')
      end
      if string.find(flags, 'P', 1, true) then
        lib().put_payload(keys[ko + 4], member, argv[ao + 7], ttl, events)
      elseif payloads then
        lib().stretch_payload(keys[ko + 4], ttl, events)
      end
      if receipt and rc then
        call('SET', keys[ko + 5], string.format('%d', d) .. rc, 'KEEPTTL')
      elseif receipt then
        call('LSET', keys[ko + 5], '0', string.format('%d', d))
      end
    end
    if receipt then
      local reply = {2, count, d, 0}
      for i = 3, #receipt do
        reply[i + 2] = receipt[i]
      end
      return reply, admit_used, admit_moved
    end
    if count < 64 and d < 35184372088832 then
      return d * 256 + count * 4 + 2, admit_used, admit_moved
    end
    return {2, count, d, 0}, admit_used, admit_moved
  end

  -- The wait line (wait_gate.lua) has the first claim on free slots: a waiter
  -- passes its gate, and so does any other admission while a line exists
  -- (one EXISTS when nobody waits). Evicting quotas never wait.
  local queued
  if not added and not evict and not waiter and count < limit and not line then
    line = call('EXISTS', keys[ko + nk])
  end
  if not added and not evict and (waiter or (count < limit and line == 1)) then
    queued = waitlib().gate(keys[ko + nk], keys[ko + nk - 1], waiter and argv[ao + na - 1], argv[ao + na], count, tonumber(limarg), now)
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
      local retry = 1000
      if k == 1 and early then
        retry = early - now
      else
        local s = r[2 * k]
        if not s and count > 0 then
          lo = lo or '(' .. string.format('%d', now)
          s = call('ZRANGE', key, lo, '+inf', 'BYSCORE', 'LIMIT', k - 1, '1', 'WITHSCORES')[2]
        end
        if s then
          retry = tonumber(s) - now
        end
      end
      if waiter then
        return {3, count, queued, retry}, admit_used, admit_moved
      end
      if count < 64 and retry < 35184372088832 then
        return retry * 256 + count * 4, admit_used, admit_moved
      end
      return {0, count, 0, retry}, admit_used, admit_moved
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
      local x = call('ZRANGE', key, lo, '+inf', 'BYSCORE', 'LIMIT', '0', b, 'WITHSCORES')
      for i = 1, #x / 2 do
        ids[i], eds[i] = x[2 * i - 1], x[2 * i]
      end
    end
    if events or payloads then
      local bytes
      b, bytes = lib().fit(keys[ko + 4], owner, ids, b, events, payloads, BYTES_MAX - used)
      admit_used = admit_used + bytes
    end
    admit_moved = admit_moved + b
    if events or payloads then
      lib().evict(key, keys[ko + 4], keys[ko + 3], owner, ids, eds, b, events, payloads)
    else
      call('ZREM', key, unpack(ids, 1, b)) -- lib().evict without events or payloads
    end
    count = count - b
    evicted = {1, 0, 0, 0}
    for i = 1, b do
      evicted[4 + i] = ids[i]
    end
    if b < k then
      evicted[1], evicted[2] = 0, count
      return evicted, admit_used, admit_moved
    end
  end

  local fresh = count == 0 and not more
  if not added then
    ttl = tonumber(argv[ao + 1])
    d = now + ttl
    ds = string.format('%d', d)
    call('ZADD', key, ds, member)
  end
  if index then
    -- After an eviction r is stale and the earliest remaining deadline
    -- unread: ZADD LT lowers the index only when d is earlier than it.
    if fresh or evicted or (early and d < early) then
      if events then
        call('ZADD', keys[ko + 2], 'LT', ds, owner)
        if call('ZRANGE', keys[ko + 2], '0', '0')[1] == owner then
          lib().wake(keys[ko + 2], ds) -- the next deadline moved earlier
        end
      else
        lib().file_owner(keys[ko + 2], owner, ds, ttl, now, events)
      end
    end
  end
  if not events then
    -- The key's TTL reaches the end of its latest deadline's bucket (see
    -- TTL_BUCKET), so at least the end of r[nr]'s, which is the latest when
    -- r held every member: a deadline in that bucket or an earlier one
    -- needs no PEXPIRE, and after a whole read (nothing evicted) a later
    -- one needs no GT.
    local b = math.floor(d / TTL_BUCKET)
    local left = string.format('%d', (b + 1) * TTL_BUCKET - now)
    if fresh then
      call('PEXPIRE', key, left)
    elseif more or evicted then
      call('PEXPIRE', key, left, 'GT')
    elseif b > math.floor(tonumber(r[nr]) / TTL_BUCKET) then
      if whole then
        call('PEXPIRE', key, left)
      else
        call('PEXPIRE', key, left, 'GT')
      end
    end
  end
  if flagged and string.find(flags, 'P', 1, true) then
    lib().put_payload(keys[ko + 4], member, argv[ao + 7], ttl, events)
  end
  if evicted then
    evicted[2], evicted[3] = count + 1, d
    local rc = {ds, ' ', string.format('%d', now + tonumber(argv[ao + 8]))}
    for i = 5, #evicted do
      rc[#rc + 1] = ' ' .. #evicted[i] .. ':' .. evicted[i]
    end
    call('SET', keys[ko + 5], table.concat(rc), 'PX', argv[ao + 8])
    return evicted, admit_used, admit_moved
  end
  if count < 63 and d < 35184372088832 then
    return d * 256 + (count + 1) * 4 + 1, admit_used, admit_moved
  end
  return {1, count + 1, d, 0}, admit_used, admit_moved
end
