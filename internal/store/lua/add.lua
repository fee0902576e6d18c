-- add.lua: upsert one member with deadline now+ttl (Set.Add).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[2]  shard due index       expset:{name:S}:due   (owner -> <= earliest deadline)
-- KEYS[3]  shard event stream    expset:{name:S}:ev
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>
--          (a set with no flags, see prelude, declares KEYS[1] only)
-- ARGV[1]  ttl in ms (>= 1)
-- ARGV[2]  member
-- The common call (no flags, the server's clock) sends those two; #ARGV
-- says whether the rest follow:
-- ARGV[3]  flags (see prelude: e, i, p, P)
-- ARGV[4]  now in ms, or "" for the server's TIME
-- ARGV[5]  owner (the index member and the events' o field)
-- ARGV[6]  payload, when flags has P
--
-- Expired members found first are dropped (with their events, and a
-- wake-up on KEYS[3] .. ':wake'). When the owner is filed in the index as
-- its head (the shard's next deadline moved earlier), its deadline is
-- published on KEYS[2] .. ':wake' (notify.go). Reply: the new
-- deadline in ms (integer).
local key, member, flags = KEYS[1], ARGV[2], ARGV[3]
local now
local events, payloads, index = false, false, false
if flags then
  if ARGV[4] ~= '' then
    now = tonumber(ARGV[4])
  end
  local find = string.find
  events = find(flags, 'e', 1, true) ~= nil
  payloads = find(flags, 'p', 1, true) ~= nil
  index = find(flags, 'i', 1, true) ~= nil
end
if not now then
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
local owner = ARGV[5]
local ttl = tonumber(ARGV[1])
local d = now + ttl
local ds = string.format('%d', d)

local first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
local more = false
if first[2] and tonumber(first[2]) <= now then
  local _
  _, more = lib().drop(key, KEYS[4], KEYS[3], owner, now, events, payloads, MAX_BATCH, false, BYTES_MAX)
  if more then
    lib().drop_member(key, KEYS[4], KEYS[3], owner, member, now, events, payloads)
  end
  first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
end
local empty = first[1] == nil

call('ZADD', key, ds, member)
if index and (empty or d < tonumber(first[2])) then
  lib().file_owner(KEYS[2], owner, ds, ttl, now, events)
end
if not events then
  -- The key's TTL reaches the end of its latest deadline's bucket (see
  -- TTL_BUCKET), so at least the end of first's: a deadline in that bucket
  -- or an earlier one needs no PEXPIRE.
  local b = math.floor(d / TTL_BUCKET)
  local left = string.format('%d', (b + 1) * TTL_BUCKET - now)
  if empty then
    call('PEXPIRE', key, left)
  elseif b > math.floor(tonumber(first[2]) / TTL_BUCKET) then
    call('PEXPIRE', key, left, 'GT')
  end
end
if flags and string.find(flags, 'P', 1, true) then
  lib().put_payload(KEYS[4], member, ARGV[6], ttl, events)
elseif payloads and not empty then
  lib().stretch_payload(KEYS[4], ttl, events)
end
return d
