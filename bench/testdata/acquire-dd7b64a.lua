-- The acquire script as of main dd7b64a (lua/prelude.lua, then lua/acquire.lua),
-- kept to measure the library's script against its earlier self in one run.
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
--       p  payloads on: owner payload hashes exist and go with their members
--       P  this call carries a payload
--       v  (acquire) evict the earliest-deadline members instead of denying
--       r  (acquire) a live re-acquire refreshes the deadline
local call = redis.call

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

-- drop removes expired members of key (deadline <= now), earliest first.
-- Without events or payloads it removes all of them in one call. Otherwise it
-- removes at most max, appending one entry per member to stream (fields o, m,
-- d and, with a payload, p) and deleting their payloads from pkey. It returns
-- how many it removed and whether expired members may remain.
local function drop(key, pkey, stream, owner, now, events, payloads, max)
  if not events and not payloads then
    return call('ZREMRANGEBYSCORE', key, '-inf', now), false
  end
  local ex = call('ZRANGE', key, '-inf', now, 'BYSCORE', 'LIMIT', 0, max, 'WITHSCORES')
  local n = #ex / 2
  if n == 0 then
    return 0, false
  end
  local ids = {}
  for i = 1, n do
    ids[i] = ex[2 * i - 1]
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
  return n, n == max
end

-- keep_ttl makes the owner key outlive its latest deadline, which is now+ttl
-- when fresh (the key is new, or now+ttl is its latest deadline) and at most
-- that otherwise. With expiry events on, keys carry no TTL: the sweeper must
-- see every member before it goes.
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

-- stretch_payload makes an existing payload hash outlive now+ttl (keys
-- without events only); a hash that does not exist is left alone.
local function stretch_payload(pkey, ttl, events)
  if events then
    return
  end
  local t = call('PTTL', pkey)
  if t ~= -2 and t < ttl then
    call('PEXPIRE', pkey, ttl)
  end
end

-- put_payload stores a member's payload and makes the hash outlive now+ttl.
local function put_payload(pkey, member, payload, ttl, events)
  call('HSET', pkey, member, payload)
  stretch_payload(pkey, ttl, events)
end

local DROP_MAX = 1000

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
if count >= limit then
  local k = count - limit + 1
  if not has(flags, 'v') then
    local s = nth(k)
    return {0, count, 0, tonumber(s) - now}
  end
  -- Evict the k earliest live members, in batches that unpack safely.
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
if fresh or (r[2] and d < tonumber(r[2])) then
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
