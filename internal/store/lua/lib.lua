-- lib.lua: lib(), the helpers of the rarer paths (expired members,
-- payloads, eviction, the due index without events, wake-ups). Shared code,
-- not a script: scripts.go places it after prelude.lua, in the scripts that
-- use it (and before the shared files that do: wait_gate.lua,
-- quota.lua). A script that never calls lib() leaves it out: defining lib
-- costs every run a closure and its upvalues (measured: about 1.4k
-- instructions a call).
--
-- lib() builds the helpers on first use: defining them up front would cost
-- every run of every script a closure each. Every local of the prelude
-- that lib's code names is an upvalue that each run allocates (measured:
-- about 0.5k instructions each), so lib names as few as it can: lib_ and
-- ENTRY_COST (which sweep.lua uses too); its other constants are its own
-- locals.
local lib_
local function lib()
  if lib_ then
    return lib_
  end
  local call = redis.call
  -- DEL_WEIGHT: a payload only deleted (no event carries it) costs about a
  -- hundredth of one copied into an event (measured: 37 us against 6 ms per
  -- MiB), so it counts 1/DEL_WEIGHT of its length.
  local DEL_WEIGHT = 32
  -- INDEX_GRACE (ms) is how long an index entry of a set without events may
  -- stay overdue (no sweeper visited it) before writes remove it, and how
  -- long the index key outlives the latest deadline filed in it (indexGrace
  -- in Go; TestIndexGraceMatchesPrelude keeps the two equal).
  local INDEX_GRACE = 3600000
  local L = {}

  -- L.keep_index makes the due index key of a set without events outlive
  -- now + ttl (ms) by INDEX_GRACE, never shortening it.
  function L.keep_index(due, ttl)
    -- GT leaves a key without TTL alone (a new index): NX gives it one.
    if call('PEXPIRE', due, ttl + INDEX_GRACE, 'GT') == 0 then
      call('PEXPIRE', due, ttl + INDEX_GRACE, 'NX')
    end
  end

  -- L.file_owner files owner in the shard's due index at deadline d (ZADD LT:
  -- the entry stays at or below the owner's earliest deadline). Without events
  -- the index is only the sweeper's shortcut (owner keys expire by their TTL),
  -- so it is kept bounded without a sweeper: first up to two entries overdue by
  -- more than INDEX_GRACE are removed (before the ZADD, so that the owner's
  -- own stale entry gives way to its new one), then the index key is made to
  -- outlive d by INDEX_GRACE (ttl is d - now in ms). With events nothing but
  -- the ZADD is done: the sweeper must see every entry.
  function L.file_owner(due, owner, d, ttl, now, events)
    if not events then
      local old = call('ZRANGE', due, '-inf', now - INDEX_GRACE, 'BYSCORE', 'LIMIT', '0', '2')
      if old[1] then
        call('ZREM', due, unpack(old))
      end
    end
    call('ZADD', due, 'LT', d, owner)
    L.head(due, owner, d)
    if not events then
      L.keep_index(due, ttl)
    end
  end

  -- L.wake publishes payload on key's wake-up channel, key .. ':wake'
  -- (notify.go): SPUBLISH, or PUBLISH where the server lacks it
  -- (miniredis).
  function L.wake(key, payload)
    local ch = key .. ':wake'
    local ok = redis.pcall('SPUBLISH', ch, payload)
    if type(ok) == 'table' and ok.err then
      call('PUBLISH', ch, payload)
    end
  end

  -- L.head wakes the sweepers when owner, just filed in the due index at
  -- deadline d, is its head: the shard's next deadline moved earlier. The
  -- head's name (ZRANGE 0 0: no score to format, no rank to walk) costs
  -- less than a publish to nobody, and most filings are not the head.
  function L.head(due, owner, d)
    if call('ZRANGE', due, '0', '0')[1] == owner then
      L.wake(due, d)
    end
  end

  -- L.fit returns how many of ids[1..n], taken in order, fit in budget
  -- bytes, and the bytes they take: each costs its own length, plus
  -- ENTRY_COST and the owner's length with events, plus with payloads its
  -- payload's length (HSTRLEN): all of it when events copy it, else
  -- 1/DEL_WEIGHT of it. The first always fits: every call makes progress.
  function L.fit(pkey, owner, ids, n, events, payloads, budget)
    local fixed = 0
    if events then
      fixed = ENTRY_COST + #owner
    end
    local used = 0
    for i = 1, n do
      local c = fixed + #ids[i]
      if payloads then
        local p = call('HSTRLEN', pkey, ids[i])
        if events then
          c = c + p
        else
          c = c + p / DEL_WEIGHT
        end
      end
      if i > 1 and used + c > budget then
        return i - 1, used
      end
      used = used + c
    end
    return n, used
  end

  -- L.drop removes expired members of key (deadline <= now), earliest
  -- first: at most max of them, and (with events or payloads) no more than
  -- fit in budget bytes (BYTES_MAX when the caller has moved nothing yet). With events it appends one
  -- entry per member to stream (fields o, m, d and, with a payload, p);
  -- with payloads it deletes their payloads from pkey. It returns how many
  -- it removed, whether expired members may remain, (bounded path only,
  -- else 0, 0) the sum and the maximum of now - deadline over the members
  -- it removed, in ms, and the bytes it moved. Members left behind stay
  -- expired (invisible to reads) for the sweeper or the next call.
  function L.drop(key, pkey, stream, owner, now, events, payloads, max, bounded, budget)
    if not events and not payloads and not bounded then
      local c = call('ZCOUNT', key, '-inf', now)
      if c <= max then
        return call('ZREMRANGEBYSCORE', key, '-inf', now), false, 0, 0, 0
      end
      call('ZREMRANGEBYRANK', key, '0', max - 1)
      return max, true, 0, 0, 0
    end
    local ex = call('ZRANGE', key, '-inf', now, 'BYSCORE', 'LIMIT', '0', max, 'WITHSCORES')
    local got = #ex / 2
    if got == 0 then
      return 0, false, 0, 0, 0
    end
    local ids = {}
    for i = 1, got do
      ids[i] = ex[2 * i - 1]
    end
    local n, used = got, 0
    if events or payloads then
      n, used = L.fit(pkey, owner, ids, got, events, payloads, budget)
      for i = n + 1, got do
        ids[i] = nil
      end
    end
    local late_sum, late_max = 0, 0
    for i = 1, n do
      local late = now - tonumber(ex[2 * i])
      late_sum = late_sum + late
      if late > late_max then
        late_max = late
      end
    end
    local ds = {}
    for i = 1, n do
      ds[i] = ex[2 * i]
    end
    L.emit(pkey, stream, owner, ids, ds, n, events, payloads)
    call('ZREMRANGEBYRANK', key, '0', n - 1)
    if events then
      L.wake(stream, '')
    end
    return n, n < got or got == max, late_sum, late_max, used
  end

  -- L.emit deletes the payloads (from pkey, with payloads) of ids[1..n],
  -- members leaving key with deadlines ds[1..n], and with events appends
  -- one entry per member to stream: fields o, m, d, then r when reason is
  -- given ("evicted"; an expiry has none), then p when it had a payload.
  function L.emit(pkey, stream, owner, ids, ds, n, events, payloads, reason)
    local pl = {}
    if payloads then
      if events then
        pl = call('HMGET', pkey, unpack(ids, 1, n))
      end
      call('HDEL', pkey, unpack(ids, 1, n))
    end
    if not events then
      return
    end
    for i = 1, n do
      local p = pl[i]
      if reason then
        if p then
          call('XADD', stream, '*', 'o', owner, 'm', ids[i], 'd', ds[i], 'r', reason, 'p', p)
        else
          call('XADD', stream, '*', 'o', owner, 'm', ids[i], 'd', ds[i], 'r', reason)
        end
      elseif p then
        call('XADD', stream, '*', 'o', owner, 'm', ids[i], 'd', ds[i], 'p', p)
      else
        call('XADD', stream, '*', 'o', owner, 'm', ids[i], 'd', ds[i])
      end
    end
  end

  -- L.evict removes ids[1..n] of key (live members, earliest first, with
  -- their deadlines ds[1..n]) with their payloads and, with events, one
  -- entry each with r=evicted (see L.emit).
  function L.evict(key, pkey, stream, owner, ids, ds, n, events, payloads)
    L.emit(pkey, stream, owner, ids, ds, n, events, payloads, 'evicted')
    call('ZREM', key, unpack(ids, 1, n))
    if events then
      L.wake(stream, '')
    end
  end

  -- L.drop_member removes member of key if it has expired (deadline <=
  -- now), with its event and payload as L.drop does. A write that rewrites
  -- member calls it when L.drop left expired members behind (more than its
  -- max): rewriting an expired member still in the set would otherwise
  -- revive it without its event.
  function L.drop_member(key, pkey, stream, owner, member, now, events, payloads)
    local d = call('ZSCORE', key, member)
    if not d or tonumber(d) > now then
      return
    end
    L.emit(pkey, stream, owner, {member}, {d}, 1, events, payloads)
    call('ZREM', key, member)
    if events then
      L.wake(stream, '')
    end
  end

  -- L.stretch_payload makes an existing payload hash outlive now+ttl (keys
  -- without events only); a hash that does not exist is left alone.
  function L.stretch_payload(pkey, ttl, events)
    if events then
      return
    end
    local t = call('PTTL', pkey)
    if t ~= -2 and t < ttl then
      call('PEXPIRE', pkey, ttl)
    end
  end

  -- L.put_payload stores a member's payload and makes the hash outlive
  -- now+ttl.
  function L.put_payload(pkey, member, payload, ttl, events)
    call('HSET', pkey, member, payload)
    L.stretch_payload(pkey, ttl, events)
  end

  lib_ = L
  return L
end
