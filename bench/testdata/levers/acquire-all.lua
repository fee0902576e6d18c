-- acquire-all.lua: every acquire lever at once: no prelude (no closures or
-- tables built per run), three arguments, a one-integer reply, the key TTL
-- refreshed only when it would fall short (buckets as acquire-lean-ttl.lua).
--
-- KEYS[1]  owner sorted set
-- ARGV[1]  ttl in ms
-- ARGV[2]  member
-- ARGV[3]  limit (1..32 in this copy)
--
-- Reply: as acquire-lean-reply.lua.
local call = redis.call
local key, member = KEYS[1], ARGV[2]
local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = tonumber(ARGV[3])
local r = call('ZRANGE', key, '0', ARGV[3], 'WITHSCORES')
if r[2] and tonumber(r[2]) <= now then
  call('ZREMRANGEBYSCORE', key, '-inf', now)
  r = call('ZRANGE', key, '0', ARGV[3], 'WITHSCORES')
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
call('ZADD', key, string.format('%d', d), member)
local B = 4194304
local bucket = math.floor(d / B)
if nr == 0 or bucket > math.floor(tonumber(r[nr]) / B) then
  call('PEXPIREAT', key, string.format('%d', (bucket + 1) * B))
end
return d * 256 + (count + 1) * 4 + 1
