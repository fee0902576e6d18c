-- acquire-lean.lua: lua/acquire.lua's paths for a set without flags (no
-- events, payloads, index, eviction or refresh), written without the
-- prelude: no closures and no helper tables built per run, flags not
-- parsed. Same KEYS, ARGV and reply as lua/acquire.lua, so it measures
-- only what building the prelude costs each run.
--
-- KEYS[1]  owner sorted set
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  ttl in ms
-- ARGV[3]  member
-- ARGV[4]  owner (unused without flags)
-- ARGV[5]  flags ("" only)
-- ARGV[6]  limit (1..32 in this copy)
--
-- Reply: {status, count, deadline, retry} as lua/acquire.lua.
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
if nr == 0 or d > tonumber(r[nr]) then
  call('PEXPIRE', key, ARGV[2])
end
return {1, count + 1, d, 0}
