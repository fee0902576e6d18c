-- sweep.lua: one bounded sweep round of one shard (Sweeper).
--
-- KEYS[1]         shard due index      expset:{name:S}:due
-- KEYS[2]         shard event stream   expset:{name:S}:ev
-- KEYS[3]         retention counter    expset:{name:S}:trimmed
-- KEYS[4..3+n]    owner sorted sets    expset:{name:S}:o:<owner>, of the
--                 owners read from the due index by the previous call (n
--                 may be 0); each owner (its member there) is its key's
--                 tail from the position #KEYS[1] (the keys share their
--                 prefix; "o:" is one byte shorter than "due")
-- KEYS[4+n..3+2n] owner payload hashes expset:{name:S}:p:<owner>, same order;
--                 declared only with flag p
-- ARGV[1]         now in ms, or "" for the server's TIME
-- ARGV[2]         flags (see prelude: e, p)
-- ARGV[3]         member budget: the most members this call removes (1..1000)
-- ARGV[4]         batch: the most due owners to list in the reply (1..1000)
-- ARGV[5]         retention max age in ms (flag e): older events are trimmed
-- ARGV[6]         retention max length (flag e): the stream keeps at most this many
-- ARGV[7]         retention max bytes (flag e): the stream's memory, as
--                 Redis estimates it (MEMORY USAGE), stays at most this
-- With flag s (the shard's schedules are due: schedules.go), two more keys,
-- last, and one more argument:
-- KEYS[#KEYS-1]   the schedules        expset:{name:S}:o:\0job:sched
-- KEYS[#KEYS]     their records        expset:{name:S}:sched (see schedule.lua)
-- ARGV[8]         grace in ms: a tick more than this late was missed while
--                 nothing swept (see "Schedules" below)
--
-- The owners were read from the index before this call, so each one's actual
-- state is read again here. For each owner, in order, while the budget
-- (members, and bytes moved: see BYTES_MAX in the prelude) lasts: its
-- expired members are dropped (each with one expiry event when flag e is
-- set), and the owner is re-filed in the index under its earliest remaining
-- deadline, or taken out of the index when it has no members left. An owner
-- with more expired members than the budget allows stays due, at a score
-- <= now, and is listed again. Owners left over when the budget runs out are
-- untouched and stay due. Without events, the index key is then made to
-- outlive the latest score filed by INDEX_GRACE (see file_owner).
--
-- One read per owner serves both the drop and the re-filing: the owner's
-- first members in deadline order (POP+1 with events, else PEEK+1), which
-- hold its expired members and, after them, its earliest remaining
-- deadline. With events that read is a ZPOPMIN, so an owner whose members
-- all expired is done in one call besides its events (and its payloads'
-- HGET and HDEL); members it popped that stay (live, or past the budget)
-- are put back as read, scores unchanged (keys of a set with events carry
-- no TTL, so a key the pop emptied loses nothing). Only when every member read has expired does a
-- second read continue by rank, for at most the rest of the budget plus
-- one. The index is written once per round: one ZADD re-files every owner
-- visited, one ZREM takes out the emptied ones. Every argument to
-- redis.call is a string (a number costs a %.17g formatting), and each
-- deadline read is converted to a number once. bench/README.md and
-- docs/design.md ("Sweeping, per member reclaimed") have the measurements.
--
-- With flag e, the stream is then trimmed to the retention: exactly, entries
-- whose ID (server time) is older than the max age, then the oldest past the
-- max length; then the oldest while the stream's memory is over the max
-- bytes, by Redis's estimate. What was trimmed is added to the retention counter, created on
-- first use and never expiring.
--
-- With flag e, a call that removed members publishes one empty message on
-- the stream's wake-up channel, KEYS[2] .. ':wake' (notify.go), which wakes
-- the consumers.
--
-- Reply: {now, expired, late_sum, late_max, owners, stale, earliest, trimmed, due...}
--   now       the "now" the call used, in ms
--   expired   members removed
--   late_sum  sum of now - deadline over the members removed, in ms
--   late_max  the largest now - deadline, in ms
--   owners    owners that lost at least one expired member, the owners
--             of jobs and schedules (\0job:...) left out
--   stale     index entries corrected without removing anything (stale early,
--             or the owner no longer exists)
--   earliest  the lowest score in the index after the call, -1 when empty;
--             when owners are due (listed below), now: the lowest score is
--             at or before it and is not read
--   trimmed   events retention removed from the stream in this call
--   due...    up to batch owners whose score is <= now, lowest score first:
--             the owners to pass to the next call (none: the shard is swept)
--   refills   (flag s, when some schedule is short of ticks) last, a list:
--             ID, generation, tail, configuration, per schedule to refill
--
-- Schedules (flag s): each due schedule's ticks at or before now leave its
-- list in order. Those on time (at most grace late) become events; of the
-- missed ones (older), the latest `catch` do (all with catch -1), the
-- others are skipped. Each event is an entry like an expiry's: o the
-- schedules' owner, m the ID, d the tick, p the payload. The schedule is
-- then filed at its next tick. A list that runs out is refilled by Go
-- from the reply: when every tick left is a missed one (nothing swept for
-- a while) and catch >= 0, none fires yet: the latest `catch` stay listed
-- and the schedule is parked PARK ms ahead, so that the refill, which
-- drops older missed ticks, decides which fire.
local tonumber, unpack = tonumber, unpack -- read once, not per owner
local due, stream, flags = KEYS[1], KEYS[2], ARGV[2]
local now = now_ms(ARGV[1])
local NOW = string.format('%d', now)
local budget = tonumber(ARGV[3])
local events, payloads = string.find(flags, 'e', 1, true) ~= nil, string.find(flags, 'p', 1, true) ~= nil
local n = #KEYS - 3
local sched = string.find(flags, 's', 1, true) ~= nil
if sched then
  n = n - 2
end
if payloads then
  n = n / 2
end

-- PEEK (a read) and POP (a pop, see below): the expired members the first
-- read of an owner takes before a second read is needed.
local PEEK, POP = 2, 1
-- RANK[i] is i as a string, for the small ranks and limits of the common
-- case.
local RANK = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10'}

local expired, late_sum, late_max, owners, stale = 0, 0, 0, 0, 0
local bytes = BYTES_MAX
local latest = 0 -- the latest score filed, for the index TTL (no events)
local gone, ng = {}, 0 -- owners to take out of the index
local refile, nr = {}, 0 -- score, owner pairs to file in the index
local ds = {} -- the deadlines read, as numbers, up to the first live one
-- With events the first read of an owner pops. Nothing may fail between a
-- pop and the writes that follow it (the events, the put back), or popped
-- members would go without their events: a stream key of another type
-- fails here, before any pop; the first command on an owner's payload hash
-- runs guarded (redis.pcall), and when it fails (a key of another type)
-- the members popped go back before the call returns its error.
local pop = events
local peek = PEEK
if pop then
  peek = POP
  if n > 0 then
    call('XLEN', stream)
  end
end
for i = 1, n do
  if budget <= 0 or bytes <= 0 then
    break
  end
  local key = KEYS[3 + i]
  local owner = string.sub(key, #due)
  local want = peek
  if want > budget then
    want = budget
  end
  -- r: the owner's first members in deadline order (popped ones first).
  local r, got, popped
  if pop then
    r = call('ZPOPMIN', key, RANK[want + 1])
    got = #r / 2
    popped = got
  else
    r = call('ZRANGE', key, '0', RANK[want], 'WITHSCORES')
    got = #r / 2
    popped = 0
  end
  -- k counts the expired members read (a prefix: the reads are in deadline
  -- order); live is the first live deadline read, if any.
  local k, live = 0, nil
  for pass = 1, 2 do
    while k < got do
      local d = tonumber(r[2 * k + 2])
      if d > now then
        live = d
        break
      end
      k = k + 1
      ds[k] = d
    end
    if pass == 2 or k < got or got <= want or budget <= want then
      break
    end
    -- Every member read has expired and the budget takes more: read on by
    -- rank, for the rest of the budget plus one (the next deadline).
    local from = got - popped
    local to = from + budget - want - 1
    local more = call('ZRANGE', key, RANK[from], RANK[to] or string.format('%d', to), 'WITHSCORES')
    for j = 1, #more do
      r[2 * got + j] = more[j]
    end
    got = got + #more / 2
  end
  -- Every read took at most budget + 1 members: the one after the budget
  -- stays, expired, and keeps the owner due.
  local kexp = k
  if k > budget then
    k = budget
  end
  if k > 0 then
    -- Take the first k while their bytes fit (the first always does), with
    -- their events and payloads.
    if payloads then
      local ids, dl = {}, {}
      for j = 1, k do
        ids[j], dl[j] = r[2 * j - 1], r[2 * j]
      end
      local pkey, used, failed = KEYS[3 + n + i], 0, nil
      if k == 1 and events then
        -- One member always fits (L.fit): its bytes are counted from the
        -- payload its event copies, with no HSTRLEN first (most owners of
        -- jobs, buckets, have one due at a time), read with HGET.
        local m, p = ids[1], redis.pcall('HGET', pkey, ids[1])
        if type(p) == 'table' then
          failed = p
        else
          call('HDEL', pkey, m)
          if p then
            call('XADD', stream, '*', 'o', owner, 'm', m, 'd', dl[1], 'p', p)
            used = #p
          else
            call('XADD', stream, '*', 'o', owner, 'm', m, 'd', dl[1])
          end
          used = used + ENTRY_COST + #owner + #m
        end
      else
        if popped > 0 then
          local t = redis.pcall('HLEN', pkey)
          if type(t) == 'table' then
            failed = t
          end
        end
        if not failed then
          k, used = lib().fit(pkey, owner, ids, k, events, payloads, bytes)
          lib().emit(pkey, stream, owner, ids, dl, k, events, payloads)
        end
      end
      if failed then
        -- The payload hash is of another type: the members popped go back
        -- as read, and the call fails as a read of the hash would have.
        local back = {}
        for j = 1, popped do
          back[2 * j - 1] = r[2 * j]
          back[2 * j] = r[2 * j - 1]
        end
        call('ZADD', key, unpack(back))
        return failed
      end
      bytes = bytes - used
    elseif events then
      local fixed, used = ENTRY_COST + #owner, 0
      for j = 1, k do
        local m = r[2 * j - 1]
        local c = fixed + #m
        if j > 1 and used + c > bytes then
          k = j - 1
          break
        end
        used = used + c
        call('XADD', stream, '*', 'o', owner, 'm', m, 'd', r[2 * j])
      end
      bytes = bytes - used
    end
    for j = 1, k do
      local late = now - ds[j]
      late_sum = late_sum + late
      if late > late_max then
        late_max = late
      end
    end
    budget = budget - k
    expired = expired + k
    if string.sub(owner, 1, 5) ~= '\0job:' then
      owners = owners + 1
    end
  else
    stale = stale + 1
  end
  if k > popped then
    local last = k - popped - 1
    call('ZREMRANGEBYRANK', key, '0', RANK[last] or string.format('%d', last))
  elseif k < popped then
    -- Popped and staying (live, or past a budget): put back as read.
    local back = {}
    for j = k + 1, popped do
      back[2 * (j - k) - 1] = r[2 * j]
      back[2 * (j - k)] = r[2 * j - 1]
    end
    call('ZADD', key, unpack(back))
  end
  -- The owner's earliest deadline now: the member after the ones removed.
  local first = r[2 * k + 2]
  if first then
    refile[nr + 1] = first
    refile[nr + 2] = owner
    nr = nr + 2
    if not events then
      local f = live
      if k < kexp then
        f = ds[k + 1]
      end
      if f > latest then
        latest = f
      end
    end
  else
    ng = ng + 1
    gone[ng] = owner
  end
end
local refills
if sched and budget > 0 and bytes > 0 then
  local SCHED, PARK, LOW, F = '\0job:sched', 1000, 8, '%d'
  local skey, shash = KEYS[#KEYS - 1], KEYS[#KEYS]
  local cutoff = now - tonumber(ARGV[8])
  local ids = call('ZRANGE', skey, '-inf', NOW, 'BYSCORE', 'LIMIT', '0', string.format(F, budget))
  for _, id in ipairs(ids) do
    if budget <= 0 or bytes <= 0 then
      break
    end
    local r = call('HGET', shash, 't:' .. id)
    local v, nv = {}, 0
    if r then
      for w in string.gmatch(r, '%S+') do
        nv = nv + 1
        v[nv] = tonumber(w)
      end
    end
    if nv < 5 or v[3] == 1 then
      -- Removed, or paused: not a schedule to fire.
      call('ZREM', skey, id)
      stale = stale + 1
    else
      -- v: gen, catch, paused, fired, seen, ticks v[6..nv]; v[6..k-1] are due.
      local catch, k, j = v[2], 6, 6
      while k <= nv and v[k] <= now do
        k = k + 1
      end
      local dry = k > nv
      if dry and k > 6 and v[nv] < cutoff and catch >= 0 then
        -- Every tick listed was missed: keep the latest catch for the refill.
        j = nv + 1 - catch
        if j < 6 then
          j = 6
        end
      else
        -- Missed ticks are v[6..m-1]: skip all but the latest catch.
        local m = 6
        while m < k and v[m] < cutoff do
          m = m + 1
        end
        j = 6
        if catch >= 0 and m - 6 > catch then
          j = m - catch
        end
        local p
        if j < k then
          p = call('HGET', shash, 'p:' .. id)
        end
        local c = ENTRY_COST + #SCHED + #id + #(p or '')
        while j < k and budget > 0 and bytes > 0 do
          local d = string.format(F, v[j])
          if p then
            call('XADD', stream, '*', 'o', SCHED, 'm', id, 'd', d, 'p', p)
          else
            call('XADD', stream, '*', 'o', SCHED, 'm', id, 'd', d)
          end
          local late = now - v[j]
          late_sum = late_sum + late
          if late > late_max then
            late_max = late
          end
          bytes = bytes - c
          budget = budget - 1
          expired = expired + 1
          v[4] = v[j]
          j = j + 1
        end
        dry = j > nv
      end
      -- v[6..j-1] leave the list (fired or skipped).
      local parts = {string.format(F, v[1]), string.format(F, catch), '0', string.format(F, v[4])}
      local seen = v[5]
      if j > 6 then
        seen = v[j - 1]
      end
      parts[5] = string.format(F, seen)
      for i = j, nv do
        parts[#parts + 1] = string.format(F, v[i])
      end
      call('HSET', shash, 't:' .. id, table.concat(parts, ' '))
      local at, parked = now + PARK, true
      if j <= nv and not (dry and v[j] <= now) then
        at, parked = v[j], false
      end
      call('ZADD', skey, string.format(F, at), id)
      if parked or nv - j + 1 < LOW then
        refills = refills or {}
        local tail = seen
        if j <= nv then
          tail = v[nv]
        end
        local nf = #refills
        refills[nf + 1] = id
        refills[nf + 2] = v[1]
        refills[nf + 3] = tail
        refills[nf + 4] = call('HGET', shash, 'c:' .. id) or ''
      end
    end
  end
  local head = call('ZRANGE', skey, '0', '0', 'WITHSCORES')
  if head[2] then
    refile[nr + 1] = head[2]
    refile[nr + 2] = SCHED
    nr = nr + 2
  else
    ng = ng + 1
    gone[ng] = SCHED
  end
end
if ng > 0 then
  call('ZREM', due, unpack(gone))
end
if nr > 0 then
  call('ZADD', due, unpack(refile))
end

-- Without events the index key outlives the latest score filed in it by
-- INDEX_GRACE (see file_owner); an owner re-filed here must not be lost with it.
if not events and latest > 0 then
  local ttl = latest - now
  if ttl < 0 then
    ttl = 0
  end
  lib().keep_index(due, ttl)
end

local trimmed = 0
if events and expired > 0 then
  lib().wake(stream, '') -- events appended: wake the consumers
end
if events then
  -- Stream IDs carry the server's clock, which now may not be (WithClock).
  local server = now
  if ARGV[1] ~= '' then
    server = now_ms('')
  end
  local minid = server - tonumber(ARGV[5])
  if minid > 0 then
    trimmed = call('XTRIM', stream, 'MINID', string.format('%d', minid))
  end
  trimmed = trimmed + call('XTRIM', stream, 'MAXLEN', ARGV[6])
  -- Bytes: MEMORY USAGE samples the stream's oldest nodes (cheap whatever
  -- its length), so the trim keeps the share of entries that fits, and
  -- looks again, a few times at most; the newest entry always stays.
  local maxb = tonumber(ARGV[7])
  for _ = 1, 4 do
    local used = call('MEMORY', 'USAGE', stream)
    if not used or used <= maxb then
      break
    end
    local len = call('XLEN', stream)
    if len <= 1 then
      break
    end
    local keep = math.floor(len * maxb / used)
    if keep < 1 then
      keep = 1
    elseif keep >= len then
      keep = len - 1
    end
    trimmed = trimmed + call('XTRIM', stream, 'MAXLEN', string.format('%d', keep))
  end
  if trimmed > 0 then
    call('INCRBY', KEYS[3], trimmed)
  end
end

local next = call('ZRANGE', due, '-inf', NOW, 'BYSCORE', 'LIMIT', '0', ARGV[4])
local earliest = now
if not next[1] then
  local head = call('ZRANGE', due, '0', '0', 'WITHSCORES')
  earliest = -1
  -- (The index's anchor, at +inf, is no owner: IndexAnchor in Go.)
  local e = tonumber(head[2] or '')
  if e and e < math.huge then
    earliest = e
  end
end
local reply = {now, expired, late_sum, late_max, owners, stale, earliest, trimmed}
for i = 1, #next do
  reply[8 + i] = next[i]
end
if refills then
  reply[#reply + 1] = refills
end
return reply
