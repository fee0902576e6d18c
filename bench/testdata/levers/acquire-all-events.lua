-- acquire-all-events.lua: acquire-all.lua for a set with expiry events:
-- no key TTL (the sweeper must see every expired member), and the owner
-- filed in the shard's due index when its first member arrives or the new
-- deadline is its earliest. (Expired members found here would need their
-- events: this copy returns an error instead, it measures the live paths.)
--
-- KEYS[1]  owner sorted set
-- KEYS[2]  shard due index
-- ARGV[1]  ttl in ms
-- ARGV[2]  member
-- ARGV[3]  limit (1..32 in this copy)
-- ARGV[4]  owner
--
-- Reply: as acquire-lean-reply.lua.
local call = redis.call
local key, member = KEYS[1], ARGV[2]
local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = tonumber(ARGV[3])
local r = call('ZRANGE', key, '0', ARGV[3], 'WITHSCORES')
if r[2] and tonumber(r[2]) <= now then
  return redis.error_reply('ERR acquire-all-events.lua: expired members are not in this copy')
end
local nr = #r
local count = nr / 2
local whole = count <= limit
if not whole then
  count = call('ZCARD', key)
end
for i = 1, nr, 2 do
  if r[i] == member then
    return tonumber(r[i + 1]) * 256 + count * 4 + 2
  end
end
if not whole then
  local cur = call('ZSCORE', key, member)
  if cur then
    return tonumber(cur) * 256 + count * 4 + 2
  end
end
if count >= limit then
  local k = count - limit + 1
  local s = r[2 * k]
  if not s then
    s = call('ZRANGE', key, '0', k - 1, 'WITHSCORES')[2 * k]
  end
  return (tonumber(s) - now) * 256 + count * 4
end
local d = now + tonumber(ARGV[1])
local ds = string.format('%d', d)
call('ZADD', key, ds, member)
if nr == 0 then
  call('ZADD', KEYS[2], ds, ARGV[4])
elseif d < tonumber(r[2]) then
  call('ZADD', KEYS[2], 'LT', ds, ARGV[4])
end
return d * 256 + (count + 1) * 4 + 1
