-- sweep.lua: one bounded sweep round of one shard (Sweeper).
--
-- KEYS[1]        shard due index      expset:{name:S}:due
-- KEYS[2]        shard event stream   expset:{name:S}:ev
-- KEYS[3..2+n]   owner sorted sets    expset:{name:S}:o:<owner>, one per ARGV[5..]
-- KEYS[3+n..2+2n] owner payload hashes expset:{name:S}:p:<owner>, same order
-- ARGV[1]        now in ms, or "" for the server's TIME
-- ARGV[2]        flags (see prelude: e, p)
-- ARGV[3]        member budget: the most members this call removes (1..1000)
-- ARGV[4]        batch: the most due owners to list in the reply (1..1000)
-- ARGV[5..4+n]   owners read from the due index by the previous call (n may be 0)
--
-- The owners were read from the index before this call, so each one's actual
-- state is checked again here. For each owner, in order, while the budget
-- lasts: its expired members are dropped (each with one expiry event when
-- flag e is set), then the owner is re-filed in the index under its earliest
-- remaining deadline, or taken out of the index when it has no members left.
-- An owner with more expired members than the budget allows stays due, at a
-- score <= now, and is listed again. Owners left over when the budget runs out
-- are untouched and stay due.
--
-- Reply: {now, expired, late_sum, late_max, owners, stale, earliest, due...}
--   now       the "now" the call used, in ms
--   expired   members removed
--   late_sum  sum of now - deadline over the members removed, in ms
--   late_max  the largest now - deadline, in ms
--   owners    owners that lost at least one expired member
--   stale     index entries corrected without removing anything (stale early,
--             or the owner no longer exists)
--   earliest  the lowest score in the index after the call, -1 when empty
--   due...    up to batch owners whose score is <= now, lowest score first:
--             the owners to pass to the next call (none: the shard is swept)
local due, stream, flags = KEYS[1], KEYS[2], ARGV[2]
local now = now_ms(ARGV[1])
local budget = tonumber(ARGV[3])
local batch = tonumber(ARGV[4])
local events, payloads = has(flags, 'e'), has(flags, 'p')
local n = #ARGV - 4

local expired, late_sum, late_max, owners, stale = 0, 0, 0, 0, 0
for i = 1, n do
  if budget <= 0 then
    break
  end
  local key, pkey, owner = KEYS[2 + i], KEYS[2 + n + i], ARGV[4 + i]
  -- drop's own read of the expired members is the re-check: it finds none
  -- when the entry was stale (or the owner is gone).
  local removed, _, ls, lm = lib().drop(key, pkey, stream, owner, now, events, payloads, budget, true)
  if removed > 0 then
    budget = budget - removed
    expired = expired + removed
    late_sum = late_sum + ls
    if lm > late_max then
      late_max = lm
    end
  end
  local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[1] then
    call('ZADD', due, first[2], owner)
  else
    call('ZREM', due, owner)
  end
  if removed > 0 then
    owners = owners + 1
  else
    stale = stale + 1
  end
end

local head = call('ZRANGE', due, 0, 0, 'WITHSCORES')
local earliest = -1
if head[2] then
  earliest = tonumber(head[2])
end
local reply = {now, expired, late_sum, late_max, owners, stale, earliest}
local next = call('ZRANGE', due, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
for i = 1, #next do
  reply[#reply + 1] = next[i]
end
return reply
