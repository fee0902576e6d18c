-- acquire-lean-reply.lua: acquire-lean.lua answering with one integer
-- instead of a table of four.
--
-- KEYS, ARGV: as acquire-lean.lua.
--
-- Reply: (deadline or retry-after) * 256 + count * 4 + status, where status
-- is 1 added, 2 already held, 0 denied; the first part is the deadline in
-- ms when allowed and the retry-after in ms when denied (deadlines < 2^44,
-- counts < 64: the whole stays below 2^53).
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
local d = now + tonumber(ARGV[2])
call('ZADD', key, string.format('%d', d), member)
if nr == 0 or d > tonumber(r[nr]) then
  call('PEXPIRE', key, ARGV[2])
end
return d * 256 + (count + 1) * 4 + 1
