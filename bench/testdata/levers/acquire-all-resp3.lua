-- acquire-all-resp3.lua: acquire-all.lua reading with RESP3
-- (redis.setresp(3)), so that scores reach Lua as numbers ({double = n})
-- instead of strings: no %.17g formatting by the server and no strtod by
-- tonumber. Each member comes as a {member, {double = score}} pair.
--
-- KEYS, ARGV, reply: as acquire-all.lua.
local call = redis.call
redis.setresp(3)
local key, member = KEYS[1], ARGV[2]
local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = tonumber(ARGV[3])
local r = call('ZRANGE', key, '0', ARGV[3], 'WITHSCORES')
if r[1] and r[1][2].double <= now then
  call('ZREMRANGEBYSCORE', key, '-inf', now)
  r = call('ZRANGE', key, '0', ARGV[3], 'WITHSCORES')
end
local count = #r
local whole = count <= limit
if not whole then
  count = call('ZCARD', key)
end
for i = 1, #r do
  if r[i][1] == member then
    return r[i][2].double * 256 + count * 4 + 2
  end
end
if not whole then
  local cur = call('ZSCORE', key, member)
  if cur then
    return cur.double * 256 + count * 4 + 2
  end
end
if count >= limit then
  local k = count - limit + 1
  local p = r[k]
  if not p then
    p = call('ZRANGE', key, '0', k - 1, 'WITHSCORES')[k]
  end
  return (p[2].double - now) * 256 + count * 4
end
local d = now + tonumber(ARGV[1])
call('ZADD', key, string.format('%d', d), member)
local B = 4194304
local bucket = math.floor(d / B)
local nr = #r
if nr == 0 or bucket > math.floor(r[nr][2].double / B) then
  call('PEXPIREAT', key, string.format('%d', (bucket + 1) * B))
end
return d * 256 + (count + 1) * 4 + 1
