-- groups.lua: helpers of the consumer-group scripts (ack, begin, bury,
-- claim, release, prune, renew, retry, take): the attempts field and the
-- pending list. scripts.go puts it after prelude.lua and before those
-- scripts' bodies only, so the scripts of the write path stay small; the
-- helpers that read a stream's groups and delete or bury entries are
-- forget.lua's, included only where used (each local function a script
-- defines costs the server about 700 instructions a call).
--
-- Attempts: the shard's attempts hash (KEYS of the script, expset:{name:S}:att)
-- holds, for each event a handler call of a group has begun and not yet
-- finished for good, the field "<entry ID> <group>" -> "<handler calls
-- begun> <token of the last call begun>" (the token, so that a begin the
-- client sent twice counts once; "<calls>" alone once a call was given
-- back; "<calls> <token> <not before>" while a retry delay longer than the
-- lease TTL runs). One field per event keeps the hash small: a listpack, whose every
-- lookup is a scan, holds twice the events it would with two fields each.
-- Reading, claiming and releasing an event never touch it.

local function att_field(id, group)
  return id .. ' ' .. group
end

-- RETRY_HOLDER is the consumer that holds events waiting for their retry
-- delay (retryHolder in retry.go; see retry.lua).
local RETRY_HOLDER = 'expset:retry'

-- att_get returns the handler calls begun of field in att (0 when none),
-- the token of the last call begun (nil when none) and the time in ms
-- before which the event must not be delivered again (nil when none: see
-- retry.lua). The field is "<calls>", "<calls> <token>" or "<calls> <token>
-- <not before>".
local function att_get(att, field)
  local v = call('HGET', att, field)
  if not v then
    return 0, nil, nil
  end
  local sp = string.find(v, ' ', 1, true)
  if not sp then
    return tonumber(v), nil, nil
  end
  local sp2 = string.find(v, ' ', sp + 1, true)
  if not sp2 then
    return tonumber(string.sub(v, 1, sp - 1)), string.sub(v, sp + 1), nil
  end
  return tonumber(string.sub(v, 1, sp - 1)), string.sub(v, sp + 1, sp2 - 1), tonumber(string.sub(v, sp2 + 1))
end

-- att_token returns the token of the last call begun of field in att (nil
-- when none): att_get without reading the numbers.
local function att_token(att, field)
  local v = call('HGET', att, field)
  if not v then
    return nil
  end
  local sp = string.find(v, ' ', 1, true)
  if not sp then
    return nil
  end
  local sp2 = string.find(v, ' ', sp + 1, true)
  if not sp2 then
    return string.sub(v, sp + 1)
  end
  return string.sub(v, sp + 1, sp2 - 1)
end

-- att_clear deletes the attempts field of id in group.
local function att_clear(att, id, group)
  call('HDEL', att, att_field(id, group))
end

-- pending_of returns the consumer holding id pending in group, and its idle
-- time in ms; nil when id is not pending in group.
local function pending_of(stream, group, id)
  local p = call('XPENDING', stream, group, id, id, 1)[1]
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
    r = call('XCLAIM', stream, group, consumer, 0, id, 'IDLE', idle, 'JUSTID')
  else
    r = call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
  end
  if r[1] then
    return true
  end
  att_clear(att, id, group)
  return false
end
