-- acquire_many.lua: several Acquires of one shard in one call
-- (Quota.AcquireMany). Loaded after prelude.lua, wait_gate.lua and
-- quota.lua (scripts.go): each request runs quota.lua's admit, as
-- acquire.lua does, so the script overhead and the server's TIME are paid
-- once per call instead of once per request.
--
-- KEYS     every request's keys in turn, each request's as acquire.lua's
--          KEYS (all of one shard: they share its hash tag)
-- ARGV[1]  now in ms, or "" for the server's TIME (read once for the call)
-- ARGV[2..]  for each request in turn: its number of keys, its number of
--          arguments, then its arguments, as acquire.lua's ARGV (no flag w)
--
-- The requests run in order, each as acquire.lua would run it alone at the
-- call's now; an error in one (a key of another type) fails that request
-- alone. The call stops early after the request that brings the members
-- moved (expired members dropped, members evicted) to MAX_BATCH or the bytes
-- moved to BYTES_MAX, so one call moves at most twice what one Acquire may;
-- the caller sends the requests it did not run again.
-- Reply: one entry per request run, in order: acquire.lua's reply, or an
-- error reply.
local now = ARGV[1]
if now == '' then
  local t = call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
else
  now = tonumber(now)
end
local replies = {}
local used, moved = 0, 0
local k, a, last = 0, 2, #ARGV
while a < last and used < BYTES_MAX and moved < MAX_BATCH do
  local nk, na = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local ok, reply, u, m = pcall(admit, KEYS, k, nk, ARGV, a + 1, na, now, lib, waitlib, TTL_BUCKET, MAX_BATCH, BYTES_MAX)
  k, a = k + nk, a + 2 + na
  if ok then
    used, moved = used + u, moved + m
  else
    if type(reply) == 'table' and reply.err then
      reply = reply.err
    end
    reply = redis.error_reply(tostring(reply))
  end
  replies[#replies + 1] = reply
end
return replies
