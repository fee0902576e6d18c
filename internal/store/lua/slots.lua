-- slots.lua: the owner slots of WithOwnerConcurrency, shared by begin, ack,
-- release, retry and bury. Shared code, not a script: scripts.go places it after
-- groups.lua.
--
-- A running handler call of an owner capped by WithOwnerConcurrency holds a
-- slot: the shard's run zset (expset:{name:S}:run) scores its field
-- "<entry ID> <group>" (att_field) with the call's lease end (server time,
-- Unix ms), and the shard's runo hash (expset:{name:S}:runo) maps that
-- field to the owner and "#<group> <owner>" to the owner's slots held. An
-- owner's events all lie on one shard, so these count every call of the
-- owner in the group. A slot goes when its call ends (ack, release, bury,
-- retry) or once its lease end has passed
-- (the consumer died): slot_lapse drops those before a slot is counted.
--
-- A script that frees a slot publishes "s" once on the shard's event
-- wake-up channel (KEYS[1] .. ':wake': every script that includes this
-- file has the shard's event stream as KEYS[1]), so that consumers holding
-- events of owners at their cap try them again at once (notify.go).

local slot_woke = false

local function slot_time()
  local t = call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- slot_drop frees the slot of field (att_field) if it holds one.
local function slot_drop(run, runo, field, group)
  local owner = call('HGET', runo, field)
  if not owner then
    return
  end
  call('ZREM', run, field)
  call('HDEL', runo, field)
  local n = '#' .. group .. ' ' .. owner
  if call('HINCRBY', runo, n, -1) <= 0 then
    call('HDEL', runo, n)
  end
  if not slot_woke then
    slot_woke = true
    lib().wake(KEYS[1], 's')
  end
end

-- slot_lapse frees the slots whose lease ended before now (at most 100 a
-- run: each is freed once, so the work is paid once per slot).
local function slot_lapse(run, runo, now)
  for _, field in ipairs(call('ZRANGE', run, '-inf', now - 1, 'BYSCORE', 'LIMIT', 0, 100)) do
    local sp = string.find(field, ' ', 1, true)
    slot_drop(run, runo, field, string.sub(field, sp + 1))
  end
end

-- slot_held returns the slots owner holds in group (lapsed ones included:
-- slot_lapse first).
local function slot_held(runo, group, owner)
  return tonumber(call('HGET', runo, '#' .. group .. ' ' .. owner) or '0')
end

-- slot_take gives field, a call of owner in group, a slot until now + ttl
-- ms, unless owner holds cap slots already: then it returns nil. Else it
-- returns the slots owner holds now, this one included. A field holding a
-- slot already (the same begin sent again) keeps it. now is the server's
-- time when the caller has run slot_lapse at it; nil: read here.
local function slot_take(run, runo, field, group, owner, cap, ttl, now)
  if not now then
    now = slot_time()
    slot_lapse(run, runo, now)
  end
  local held = slot_held(runo, group, owner)
  if not call('ZSCORE', run, field) then
    if held >= cap then
      return nil
    end
    held = call('HINCRBY', runo, '#' .. group .. ' ' .. owner, 1)
    call('HSET', runo, field, owner)
  end
  call('ZADD', run, now + ttl, field)
  return held
end

-- slot_renew moves the lease end of field's slot, if it holds one, to now +
-- ttl ms.
local function slot_renew(run, field, ttl)
  call('ZADD', run, 'XX', slot_time() + ttl, field)
end
