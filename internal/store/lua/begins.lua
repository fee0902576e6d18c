-- begins.lua: start handler calls of expiry events of one shard that a
-- consumer holds: read (a plain XREADGROUP, which charges nothing), claimed
-- (their lease lapsed elsewhere), read ahead or set aside before (their
-- owner was at its cap). Set.Consume and Set.Reserve begin every handler
-- call through it.
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard owner slots     expset:{name:S}:runo  (with a cap only; see
--          groups.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  consumer
-- ARGV[3]  lease TTL in ms
-- ARGV[4]  attempts allowed, WithMaxAttempts
-- ARGV[5]  idle time in ms under which this consumer's own lease is kept as
--          it is (a sixth of the lease TTL)
-- ARGV[6]  the owners' cap, WithOwnerConcurrency (0: none)
-- ARGV[7]  how many of the first items are fresh: new events this
--          consumer read (XREADGROUP ... >) less than ARGV[5] ms ago, so
--          nobody else can have taken them (a take needs them idle ARGV[3]
--          ms) and no call of them has begun: they are begun without a look
--          at the pending list or the attempts field (a Set.Cancel that
--          acknowledges a job's event read and not begun leaves a mark in
--          its attempts field, which the HSET or HSETNX of every fresh
--          begin finds)
-- ARGV[8]  with a cap, "F:<len(group)>:<group>": what the group's
--          first-slot fields start with (see groups.lua); else ""
-- ARGV[9..] triples (at most 1000): an entry ID, the token of its call
--          (unique to the handler call, so that a begin run twice counts
--          once) and the event's owner ("" for a job of no owner: no slot,
--          no owner pause)
--
-- Nothing is begun while the group is paused (the attempts hash's field
-- "P:<group>" is "g": pause.lua), nor an event of an owner paused in the
-- group (then that field counts the owners paused, and
-- "O:<len(group)>:<group><owner>" exists); a begin sent again answers as
-- its first run did.
-- An entry is begun when it is pending in the group, held by this consumer
-- or idle at least the lease TTL (then nobody else may take it now), with
-- attempts left and, with a cap, a free slot of its owner (or the slot its
-- last call holds, which passes to this one): its attempts field becomes
-- -- "<calls begun + 1> <token>" ("... <slot>" with a slot), and it is
-- taken (XCLAIM ... JUSTID: idle 0, the delivery count left alone) unless
-- this consumer took it less than ARGV[5] ms ago, whose lease then runs on. A pair whose token
-- is already the last call's is that begin sent again: its attempt number
-- is returned as it was, counted once (a fresh item's field is written only
-- where none is: a second run finds it). The consumer makes every call it
-- begins at once, so a count raised here is a call made.
-- Reply: one integer per item, in order: for a call begun, 4 x its attempt
-- number, plus 2 when the lease was taken now (not when the lease taken
-- ARGV[5] ms ago at most runs on), plus 1 with a cap when the owner now
-- holds its every slot for certain (its next events wait for this call's
-- end: a call that takes the owner's first slot knows it only at a cap of
-- 1); else 0 (another consumer holds the event, it was acknowledged or
-- trimmed), -1 (every attempt is used: a claim buries it), -2 (the owner
-- holds its every slot: nothing changed), -3 (the group is paused:
-- nothing changed) or -4 (the owner is paused in the group: nothing
-- changed). (Integers, not a table per item: a table costs its building
-- and its conversion.)
local stream, att, group, consumer = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
RUNO = KEYS[3]
local out = {}
local paused = call('HGET', att, 'P:' .. group)
local capped, max, vis, keep, slot_take = ARGV[6] ~= '0', nil, nil, nil, nil
local step = 3
if capped then
  local slot_pre = ARGV[8]
  -- slot_take takes a slot of owner in group (see groups.lua): its first
  -- when free, else one of the others unless they are all held (then it
  -- returns nil). It returns the slot's field, and 1 when owner now holds
  -- every slot for certain, else 0. (The cap is read as a number only
  -- when the first slot is held.)
  slot_take = function(owner)
    local f = slot_pre .. owner
    if call('HSETNX', RUNO, f, '1') == 1 then
      if ARGV[6] == '1' then
        return f, 1
      end
      return f, 0
    end
    if ARGV[6] == '1' then
      return nil
    end
    local n = 'N' .. string.sub(f, 2)
    local more = tonumber(ARGV[6]) - 1
    local held = call('HINCRBY', RUNO, n, '1')
    if held > more then
      if call('HINCRBY', RUNO, n, '-1') <= 0 then
        call('HDEL', RUNO, n)
      end
      return nil
    end
    if held == more then
      return n, 1
    end
    return n, 0
  end
end
local fresh = 9 + tonumber(ARGV[7]) * step
if fresh <= #ARGV then
  -- (Only an item that is not fresh needs them: a fresh one has used no
  -- attempt yet.)
  max, vis, keep = tonumber(ARGV[4]), tonumber(ARGV[3]), tonumber(ARGV[5])
end

for i = 9, #ARGV - 1, step do
  local id, tok, owner = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local r
  local holder, idle = consumer, 0
  if i >= fresh then
    holder, idle = pending_of(stream, group, id)
  end
  if not holder or (holder ~= consumer and idle < vis) then
    r = 0
    if not holder then
      -- Acknowledged: an attempts field left is a Set.Cancel's mark.
      call('HDEL', att, att_field(id, group))
    end
  elseif paused and (paused == 'g' or (owner ~= '' and call('HEXISTS', att, 'O:' .. #group .. ':' .. group .. owner) == 1)) then
    -- Paused: nothing begins, but a begin sent again (it ran before the
    -- pause) answers as it did.
    local used, token = att_get(att, att_field(id, group))
    if token == tok and holder == consumer then
      r = used * 4 + 2
    elseif paused == 'g' then
      r = -3
    else
      r = -4
    end
  else
    local field = att_field(id, group)
    local used, token, had = 0, nil, nil
    if i >= fresh then
      local _
      used, token, _, had = att_get(att, field)
    end
    local full, slot, took = 0, nil, false
    if token == tok and holder == consumer then
      r = used * 4 + 2
    elseif i >= fresh and used >= max then
      r = -1
    elseif capped and owner ~= '' then
      slot = had
      if not had then
        slot, full = slot_take(owner)
        if not slot then
          r, full = -2, 0
          if i < fresh then
            -- Unless this begin ran before (the client sent it twice) and
            -- its first run took the owner's last slot: it answers as then.
            local u, t = att_get(att, field)
            if t == tok then
              r = u * 4 + 2
            end
          end
        else
          took = true
        end
      end
    elseif had then
      -- A consumer without the cap (its scripts have no RUNO) leaves an
      -- event whose last call holds a slot, lapsed, to claim.lua, which
      -- frees the slot: it would overwrite the mark and lose the slot.
      r = 0
    end
    if not r then
      local taken = 0
      if i >= fresh and (holder ~= consumer or idle >= keep) then
        if hold(stream, att, group, consumer, id) then
          taken = 1
        else
          r = 0 -- (hold freed the last call's slot with its field)
          if took then
            slot_free(slot, true)
          end
        end
      end
      if not r then
        local v
        if slot then
          v = string.format('%d', used + 1) .. ' ' .. tok .. ' ' .. slot
        else
          v = string.format('%d', used + 1) .. ' ' .. tok
        end
        if i >= fresh then
          call('HSET', att, field, v)
        elseif not took then
          -- A fresh item has no field (HSET adds it: 1), but when this
          -- begin ran before (the client sent it twice: the same value),
          -- or Set.Cancel deleted the event of a job of an owner after
          -- this consumer read it, leaving its mark (see cancel.lua): the
          -- entry is then acknowledged, the mark goes, nothing begins.
          -- (HSETNX would scan the hash twice on every fresh begin.)
          if call('HSET', att, field, v) == 0 and not pending_of(stream, group, id) then
            call('HDEL', att, field)
            r = 0
          end
        elseif call('HSETNX', att, field, v) == 0 then
          -- This begin ran before (the client sent it twice): the slot its
          -- first run took is held already, and its field says which. Or
          -- Set.Cancel left its mark (a token "-"), which goes now:
          -- nothing begins.
          slot_free(slot, true)
          local u, t = att_get(att, field)
          if t == tok then
            r = u * 4 + 2
          else
            if t == '-' then
              call('HDEL', att, field)
            end
            r = 0
          end
        end
        if not r then
          r = (used + 1) * 4 + taken * 2 + full
        end
      end
    end
  end
  out[#out + 1] = r
end
return out
