-- prelude.lua: helpers shared by every expset script that writes or reads
-- deadlines. It is prepended to each script body at load time (scripts.go),
-- so each EVALSHA still runs one self-contained script.
--
-- Conventions every script follows:
--   * ARGV[1] is "now" in Unix milliseconds, or "" to read the server's TIME.
--   * Scores are deadlines in whole Unix milliseconds (< 2^53, exact in a
--     double). Numbers reach redis.call as arguments (formatted with 17 digits)
--     or are returned as integer replies; none passes through tostring or "..".
--   * A member is live while its deadline > now; at deadline <= now it is expired.
--   * Flags are single letters in one ARGV string:
--       e  expiry events on: every expired member removed gets one stream entry
--       i  the shard's due index is kept (always with e; WithSweepIndex)
--       p  payloads on: owner payload hashes exist and go with their members
--       P  this call carries a payload
--       v  (acquire) evict the earliest-deadline members instead of denying
--       r  (acquire) a live re-acquire refreshes the deadline
local call = redis.call

-- Every redis.call, every closure and every global lookup costs measurable
-- time on each run (the script body runs afresh on every EVALSHA), so the
-- common paths call as little as they can; bench/README.md has the numbers.

local function now_ms(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  local t = call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

local function has(flags, c)
  return string.find(flags, c, 1, true) ~= nil
end

-- keep_ttl makes the owner key outlive its latest deadline, which is now+ttl
-- when fresh (the key is new, or now+ttl is its latest deadline) and at most
-- that otherwise. With expiry events on, keys carry no TTL: the sweeper must
-- see every expired member before it goes.
local function keep_ttl(key, ttl, fresh, events)
  if events then
    return
  end
  if fresh then
    call('PEXPIRE', key, ttl)
  else
    call('PEXPIRE', key, ttl, 'GT')
  end
end

local DROP_MAX = 1000

-- lib() returns the helpers of the rarer paths (expired members, payloads),
-- built on first use: defining them up front would cost every run of every
-- script a closure each.
local lib_
local function lib()
  if lib_ then
    return lib_
  end
  local L = {}

  -- L.drop removes expired members of key (deadline <= now), earliest
  -- first. Without events, payloads or bounded it removes all of them in one
  -- call. Otherwise it removes at most max, appending one entry per member to
  -- stream (fields o, m, d and, with a payload, p) and deleting their
  -- payloads from pkey. It returns how many it removed, whether expired
  -- members may remain, and (bounded path only, else 0, 0) the sum and the
  -- maximum of now - deadline over the members it removed, in ms.
  function L.drop(key, pkey, stream, owner, now, events, payloads, max, bounded)
    if not events and not payloads and not bounded then
      return call('ZREMRANGEBYSCORE', key, '-inf', now), false, 0, 0
    end
    local ex = call('ZRANGE', key, '-inf', now, 'BYSCORE', 'LIMIT', 0, max, 'WITHSCORES')
    local n = #ex / 2
    if n == 0 then
      return 0, false, 0, 0
    end
    local ids = {}
    local late_sum, late_max = 0, 0
    for i = 1, n do
      ids[i] = ex[2 * i - 1]
      local late = now - tonumber(ex[2 * i])
      late_sum = late_sum + late
      if late > late_max then
        late_max = late
      end
    end
    local pl = {}
    if payloads then
      pl = call('HMGET', pkey, unpack(ids))
      call('HDEL', pkey, unpack(ids))
    end
    if events then
      for i = 1, n do
        if pl[i] then
          call('XADD', stream, '*', 'o', owner, 'm', ids[i], 'd', ex[2 * i], 'p', pl[i])
        else
          call('XADD', stream, '*', 'o', owner, 'm', ids[i], 'd', ex[2 * i])
        end
      end
    end
    call('ZREMRANGEBYRANK', key, 0, n - 1)
    return n, n == max, late_sum, late_max
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
    local p = false
    if payloads then
      p = call('HGET', pkey, member)
      call('HDEL', pkey, member)
    end
    if events then
      if p then
        call('XADD', stream, '*', 'o', owner, 'm', member, 'd', d, 'p', p)
      else
        call('XADD', stream, '*', 'o', owner, 'm', member, 'd', d)
      end
    end
    call('ZREM', key, member)
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
