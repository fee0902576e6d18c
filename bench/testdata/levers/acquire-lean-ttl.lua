-- acquire-lean-ttl.lua: acquire-lean.lua with the key TTL refreshed only
-- when it would otherwise fall short. Every write sets the key to expire at
-- the end of its deadline's bucket (buckets below), so
-- the key's expiry is always at or after the end of its latest deadline's
-- bucket, and a write whose deadline ends in the same bucket as the latest
-- one needs no PEXPIREAT. Bound: a key lives at most one bucket past its
-- last deadline. This copy uses buckets of 2^22 ms (70 min) so that every
-- measured call takes the skip and the count is the cost of a skipped
-- refresh; a production bucket would be a fraction of the ttl. (The
-- benchmark seeds exact key TTLs, so the copy is measured for cost only.)
--
-- KEYS, ARGV, reply: as acquire-lean.lua.
local call = redis.call
local key, member = KEYS[1], ARGV[3]
local now
if ARGV[1] == '' then
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
else
  now = tonumber(ARGV[1])
end
local limit = tonumber(ARGV[6])
local r = call('ZRANGE', key, '0', ARGV[6], 'WITHSCORES')
if r[2] and tonumber(r[2]) <= now then
  call('ZREMRANGEBYSCORE', key, '-inf', now)
  r = call('ZRANGE', key, '0', ARGV[6], 'WITHSCORES')
end
local nr = #r
local count = nr / 2
local whole = count <= limit
if not whole then
  count = call('ZCARD', key)
end
for i = 1, nr, 2 do
  if r[i] == member then
    return {2, count, tonumber(r[i + 1]), 0}
  end
end
if not whole then
  local cur = call('ZSCORE', key, member)
  if cur then
    return {2, count, tonumber(cur), 0}
  end
end
if count >= limit then
  local k = count - limit + 1
  local s = r[2 * k]
  if not s then
    s = call('ZRANGE', key, '0', k - 1, 'WITHSCORES')[2 * k]
  end
  return {0, count, 0, tonumber(s) - now}
end
local d = now + tonumber(ARGV[2])
call('ZADD', key, string.format('%d', d), member)
local B = 4194304
local bucket = math.floor(d / B)
if nr == 0 or bucket > math.floor(tonumber(r[nr]) / B) then
  call('PEXPIREAT', key, string.format('%d', (bucket + 1) * B))
end
return {1, count + 1, d, 0}
