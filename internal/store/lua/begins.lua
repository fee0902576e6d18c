-- begins.lua: start handler calls of expiry events of one shard that a
-- consumer holds: read (a plain XREADGROUP, which charges nothing), claimed
-- (their lease lapsed elsewhere), read ahead or set aside before (their
-- owner was at its cap). Set.Consume and Set.Reserve begin every handler
-- call through it.
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- KEYS[3]  shard owner slots     expset:{name:S}:run   (WithOwnerConcurrency
-- KEYS[4]  their owners          expset:{name:S}:runo   only; see slots.lua)
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
--          at the pending list or the attempts field (never a job's: a
--          Set.Cancel acknowledges one read and not begun)
-- ARGV[8..] pairs (at most 1000): an entry ID, and the token of its call
--          (unique to the handler call, so that a begin run twice counts once);
--          with a cap, triples: and the event's owner ("" for a job: no slot)
--
-- An entry is begun when it is pending in the group, held by this consumer
-- or idle at least the lease TTL (then nobody else may take it now), with
-- attempts left and, with a cap, a free slot of its owner: its attempts
-- field becomes "<calls begun + 1> <token>", and it is taken (XCLAIM ...
-- JUSTID: idle 0, the delivery count left alone) unless this consumer took
-- it less than ARGV[5] ms ago, whose lease then runs on. A pair whose token
-- is already the last call's is that begin sent again: its attempt number
-- is returned as it was, counted once. The consumer makes every call it
-- begins at once, so a count raised here is a call made.
-- Reply: one item per pair, in order: {the attempt number of the call, 1 when
-- taken now or 0 when the lease taken ARGV[5] ms ago at most runs on, and
-- with a cap 1 when the owner now holds its every slot (its next events
-- wait for this call's end) or 0}, or 0 (another consumer holds the event,
-- it was acknowledged or trimmed), or -1 (every attempt is used: a claim
-- buries it), or -2 (the owner holds its every slot: nothing changed).
local stream, att, group, consumer = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local max, cap, vis, keep = tonumber(ARGV[4]), 0, nil, nil
local step = 2
if ARGV[6] ~= '0' then
  cap, step = tonumber(ARGV[6]), 3
end
local fresh = 8 + tonumber(ARGV[7]) * step
if cap > 0 or fresh <= #ARGV then
  -- (Only a slot's lease or an item that is not fresh needs them.)
  vis, keep = tonumber(ARGV[3]), tonumber(ARGV[5])
end
local out = {}
for i = 8, #ARGV - 1, step do
  local id, tok, owner = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local r
  local holder, idle = consumer, 0
  if i >= fresh then
    holder, idle = pending_of(stream, group, id)
  end
  if not holder or (holder ~= consumer and idle < vis) then
    r = 0
  else
    local field = att_field(id, group)
    local used, token = 0, nil
    if i >= fresh then
      used, token = att_get(att, field)
    end
    local full = 0
    if token == tok and holder == consumer then
      r = {used, 1, 0}
    elseif used >= max then
      r = -1
    elseif cap > 0 and owner ~= '' then
      local held = slot_take(KEYS[3], KEYS[4], field, group, owner, cap, vis)
      if not held then
        r = -2
      elseif held >= cap then
        full = 1
      end
    end
    if not r then
      local taken = 0
      if i >= fresh and (holder ~= consumer or idle >= keep) then
        if hold(stream, att, group, consumer, id) then
          taken = 1
        else
          r = 0
          if cap > 0 then
            slot_drop(KEYS[3], KEYS[4], field, group)
          end
        end
      end
      if not r then
        call('HSET', att, field, string.format('%d', used + 1) .. ' ' .. tok)
        r = {used + 1, taken, full}
      end
    end
  end
  out[#out + 1] = r
end
return out
