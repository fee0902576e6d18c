-- acquire-lean-argv.lua: acquire-lean.lua with the arguments a set without
-- flags needs and no more: always the server's TIME, no owner, no flags.
--
-- KEYS[1]  owner sorted set
-- ARGV[1]  ttl in ms
-- ARGV[2]  member
-- ARGV[3]  limit (1..32 in this copy)
--
-- Reply: {status, count, deadline, retry} as lua/acquire.lua.
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
local d = now + tonumber(ARGV[1])
call('ZADD', key, string.format('%d', d), member)
if nr == 0 or d > tonumber(r[nr]) then
  call('PEXPIRE', key, ARGV[1])
end
return {1, count + 1, d, 0}
