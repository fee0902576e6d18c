-- add.lua: upsert one member with deadline now+ttl (Set.Add).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[2]  shard due index       expset:{name:S}:due   (owner -> <= earliest deadline)
-- KEYS[3]  shard event stream    expset:{name:S}:ev
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>
--          (a set with no flags, see prelude, declares KEYS[1] only)
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  ttl in ms (>= 1)
-- ARGV[3]  member
-- ARGV[4]  owner (the index member and the events' o field)
-- ARGV[5]  flags (see prelude: e, i, p, P)
-- ARGV[6]  payload, when flags has P
--
-- Expired members found first are dropped (with their events). Reply: the new
-- deadline in ms (integer).
local key, member, owner, flags = KEYS[1], ARGV[3], ARGV[4], ARGV[5]
local now = now_ms(ARGV[1])
local ttl = tonumber(ARGV[2])
local d = now + ttl
local events, payloads, index = has(flags, 'e'), has(flags, 'p'), has(flags, 'i')

local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
local more = false
if first[2] and tonumber(first[2]) <= now then
  local _
  _, more = lib().drop(key, KEYS[4], KEYS[3], owner, now, events, payloads, MAX_BATCH)
  if more then
    lib().drop_member(key, KEYS[4], KEYS[3], owner, member, now, events, payloads)
  end
  first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
end
local empty = first[1] == nil

call('ZADD', key, d, member)
if index and (empty or d < tonumber(first[2])) then
  file_owner(KEYS[2], owner, d, ttl, now, events)
end
keep_ttl(key, ttl, empty, events)
if has(flags, 'P') then
  lib().put_payload(KEYS[4], member, ARGV[6], ttl, events)
elseif payloads and not empty then
  lib().stretch_payload(KEYS[4], ttl, events)
end
return d
