-- acquire-all-noscores.lua: acquire-all.lua reading the first limit+1
-- members without their scores, then only the scores it needs with one
-- ZMSCORE: the earliest (whether anything expired; on a denial at the
-- limit, the retry), the member's own when it is held, and the latest when
-- a new deadline may need the key's TTL pushed.
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
local r = call('ZRANGE', key, '0', ARGV[3])
local n = #r
local at
for i = 1, n do
  if r[i] == member then
    at = i
    break
  end
end
local s
if n > 0 then
  if at then
    s = call('ZMSCORE', key, r[1], r[at])
  elseif n < limit then
    s = call('ZMSCORE', key, r[1], r[n])
  else
    s = call('ZMSCORE', key, r[1])
  end
  if tonumber(s[1]) <= now then
    -- The measured states hold no expired member; this copy stops here.
    return redis.error_reply('expired members: not handled by this copy')
  end
end
local count = n
if n > limit then
  count = call('ZCARD', key)
end
if at then
  return tonumber(s[2]) * 256 + count * 4 + 2
end
if count >= limit then
  return (tonumber(s[1]) - now) * 256 + count * 4
end
local d = now + tonumber(ARGV[1])
call('ZADD', key, string.format('%d', d), member)
local B = 4194304
local bucket = math.floor(d / B)
if n == 0 or bucket > math.floor(tonumber(s[2]) / B) then
  call('PEXPIREAT', key, string.format('%d', (bucket + 1) * B))
end
return d * 256 + (count + 1) * 4 + 1
