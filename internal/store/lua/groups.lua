-- groups.lua: helpers of the consumer-group scripts (ack, begins, bury,
-- claim, release, prune, remove_group, renew, retry): the attempts field,
-- the owner slots and the pending list. scripts.go puts it after
-- prelude.lua and before those scripts' bodies only, so the scripts of the
-- write path stay small; the helpers that read a stream's groups and
-- delete or bury entries are forget.lua's, included only where used (each
-- local function a script defines costs the server about 700 instructions
-- a call).
--
-- Attempts: the shard's attempts hash (KEYS of the script, expset:{name:S}:att)
-- holds, for each event a handler call of a group has begun and not yet
-- finished for good, the field "<entry ID> <group>" -> "<handler calls
-- begun> <token of the last call begun>" (the token, so that a begin the
-- client sent twice counts once; "<calls>" alone once a call was given
-- back; "<calls> <token> <not before>" while a retry delay longer than the
-- lease TTL runs; "<calls> <token> <slot>" while the call holds a slot of
-- an owner, the slot's field, below). One field per event keeps the hash small: a listpack, whose every
-- lookup is a scan, holds twice the events it would with two fields each.
-- Reading, claiming and releasing an event never touch it.
--
-- Owner slots (WithOwnerConcurrency): a handler call of an owner under the
-- cap holds a slot of its owner, kept in the shard's slots hash, RUNO
-- (expset:{name:S}:runo), and marked in its attempts field (above) by the
-- slot's field there. An owner's first slot in a group is a field of its
-- own, "F:<len(group)>:<group><owner>" -> "1", there while a call holds
-- it: taken with one HSETNX, freed with the HDEL an acknowledgement
-- batches, it costs an owner with one call at a time no count to keep.
-- Its other slots are counted in "N:<len(group)>:<group><owner>" -> the
-- slots held beyond the first, absent at none. begins.lua takes a slot;
-- whatever ends the call's hold on the event frees it: its
-- acknowledgement, retry, burial or release, the clearing of its attempts
-- field, or a claim (its lease lapsed: the consumer died or stalled past
-- the lease TTL). Every script that may free one sets RUNO first (a
-- script of a consumer without the cap may leave it nil: its calls hold
-- no slot).
local RUNO
local slot_woke = false

-- slot_free frees slot (its field in RUNO, the mark of a call's attempts
-- field) and, once a script unless quiet (a slot taken and given back in
-- the same script, which no one waited for), publishes "s" on the shard's
-- event wake-up channel (KEYS[1] .. ':wake', notify.go: SPUBLISH, or
-- PUBLISH where the server lacks it), so that consumers holding events of
-- owners at their cap try them again at once. A first slot's field is
-- deleted at once, or appended to dels when given, for the caller's own
-- HDEL of RUNO.
local function slot_free(slot, quiet, dels)
  if not RUNO then
    return
  end
  if string.byte(slot) == 70 then -- "F:..."
    if dels then
      dels[#dels + 1] = slot
    else
      call('HDEL', RUNO, slot)
    end
  elseif call('HINCRBY', RUNO, slot, '-1') <= 0 then
    call('HDEL', RUNO, slot)
  end
  if not (quiet or slot_woke) then
    slot_woke = true
    local ch = KEYS[1] .. ':wake'
    local r = redis.pcall('SPUBLISH', ch, 's')
    if type(r) == 'table' and r.err then
      call('PUBLISH', ch, 's')
    end
  end
end

local function att_field(id, group)
  return id .. ' ' .. group
end

-- RETRY_HOLDER is the consumer that holds events waiting for their retry
-- delay (retryHolder in retry.go; see retry.lua).
local RETRY_HOLDER = 'expset:retry'

-- att_get returns the handler calls begun of field in att (0 when none),
-- the token of the last call begun (nil when none), the time in ms before
-- which the event must not be delivered again (nil when none: see
-- retry.lua) and the mark of the owner slot the last call holds (nil when
-- none).
local function att_get(att, field)
  local v = call('HGET', att, field)
  if not v then
    return 0, nil, nil, nil
  end
  local sp = string.find(v, ' ', 1, true)
  if not sp then
    return tonumber(v), nil, nil, nil
  end
  local used = tonumber(string.sub(v, 1, sp - 1))
  local sp2 = string.find(v, ' ', sp + 1, true)
  if not sp2 then
    return used, string.sub(v, sp + 1), nil, nil
  end
  local tok = string.sub(v, sp + 1, sp2 - 1)
  local b = string.byte(v, sp2 + 1)
  if b == 70 or b == 78 then -- a slot's field: "F:..." or "N:..."
    return used, tok, nil, string.sub(v, sp2 + 1)
  end
  return used, tok, tonumber(string.sub(v, sp2 + 1)), nil
end

-- att_token returns the token of the last call begun in v, the value of an
-- attempts field (false or nil when none: the caller reads the fields of
-- a batch with one HMGET), nil when none, and the mark of the owner slot
-- it holds (nil when none): att_get's reading without the numbers.
local function att_token(v)
  if not v then
    return nil, nil
  end
  local sp = string.find(v, ' ', 1, true)
  if not sp then
    return nil, nil
  end
  local sp2 = string.find(v, ' ', sp + 1, true)
  if not sp2 then
    return string.sub(v, sp + 1), nil
  end
  local slot
  local b = string.byte(v, sp2 + 1)
  if b == 70 or b == 78 then
    slot = string.sub(v, sp2 + 1)
  end
  return string.sub(v, sp + 1, sp2 - 1), slot
end

-- att_clear deletes the attempts field of id in group, and frees the slot
-- its call held (read first, where the script set RUNO).
local function att_clear(att, id, group)
  local field = att_field(id, group)
  if RUNO then
    local _, _, _, slot = att_get(att, field)
    if slot then
      slot_free(slot)
    end
  end
  call('HDEL', att, field)
end

-- pending_of returns the consumer holding id pending in group, and its idle
-- time in ms; nil when id is not pending in group.
local function pending_of(stream, group, id)
  local p = call('XPENDING', stream, group, id, id, '1')[1]
  if not p then
    return nil, 0
  end
  return p[2], tonumber(p[3])
end

-- hold makes consumer hold id, pending in group, with idle time idle (0
-- when nil) without counting a delivery (XCLAIM ... JUSTID), and reports
-- whether the entry is still there: Redis drops an entry deleted from the
-- stream (retention trimmed it) from the pending list when it is claimed,
-- and then its attempts field goes too, so nothing is left behind.
local function hold(stream, att, group, consumer, id, idle)
  local r
  if idle then
    r = call('XCLAIM', stream, group, consumer, '0', id, 'IDLE', idle, 'JUSTID')
  else
    r = call('XCLAIM', stream, group, consumer, '0', id, 'JUSTID')
  end
  if r[1] then
    return true
  end
  att_clear(att, id, group)
  return false
end
