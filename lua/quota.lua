-- quota.lua: admit(keys, ko, nk, argv, ao, na, now), the quota's admission
-- of one request, shared by acquire.lua (one request per call) and
-- acquire_many.lua (the requests of one shard in one call). Shared code, not
-- a script: scripts.go places it after prelude.lua and wait_gate.lua.
--
-- admit reads keys[ko + 1 .. ko + nk] and argv[ao + 1 .. ao + na], which are
-- what acquire.lua's header names KEYS and ARGV (acquire_many.lua passes its
-- own KEYS and ARGV with offsets, building no table per request); now is the
-- time in ms, or nil to take it from argv (or the server's TIME). It returns
-- acquire.lua's reply, and leaves in admit_used and admit_moved the bytes
-- (see BYTES_MAX) and the members (expired members dropped, members evicted)
-- it moved.
local admit_used, admit_moved = 0, 0
local function admit(keys, ko, nk, argv, ao, na, now)
  local call = redis.call -- a local, not the prelude's: an upvalue costs every run
  admit_used, admit_moved = 0, 0
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
  local limit = tonumber(limarg)

  -- Read the first want+1 members. '0' and argv[ao + 3] go to Redis as strings: a
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
    local dropped, _
    dropped, more, _, _, used = lib().drop(key, keys[ko + 4], keys[ko + 3], owner, now, events, payloads, MAX_BATCH, false, BYTES_MAX)
    admit_used, admit_moved = used, dropped
    if more then
      lib().drop_member(key, keys[ko + 4], keys[ko + 3], owner, member, now, events, payloads)
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

  local ttl = tonumber(argv[ao + 1])
  if cur then
    local d = tonumber(cur)
    local receipt
    if evict then
      receipt = call('LRANGE', keys[ko + 5], 0, -1)
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
      if receipt then
        call('LSET', keys[ko + 5], 0, string.format('%d', d))
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
  if not evict and (waiter or (count < limit and call('EXISTS', keys[ko + nk]) == 1)) then
    queued = waitlib().gate(keys[ko + nk], keys[ko + nk - 1], waiter and argv[ao + na - 1], argv[ao + na], count, limit, now)
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
      local bytes
      b, bytes = lib().fit(keys[ko + 4], owner, ids, b, events, payloads, BYTES_MAX - used)
      admit_used = admit_used + bytes
    end
    admit_moved = admit_moved + b
    lib().evict(key, keys[ko + 4], keys[ko + 3], owner, ids, eds, b, events, payloads)
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
    lib().put_payload(keys[ko + 4], member, argv[ao + 7], ttl, events)
  end
  if evicted then
    evicted[2], evicted[3] = count + 1, d
    call('DEL', keys[ko + 5])
    call('RPUSH', keys[ko + 5], ds, string.format('%d', now + tonumber(argv[ao + 8])), unpack(evicted, 5))
    call('PEXPIRE', keys[ko + 5], argv[ao + 8])
    return evicted
  end
  if count < 63 and d < 35184372088832 then
    return d * 256 + (count + 1) * 4 + 1
  end
  return {1, count + 1, d, 0}
end
