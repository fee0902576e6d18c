-- group_take.lua: take call slots of a consumer group capped as a whole
-- (WithGroupConcurrency), before the calls are begun.
--
-- KEYS[1]  the group's call slots  expset:{name}:gslots:<group>  zset: a
--          call's token -> the end of its slot's lease (Unix ms, the
--          server's TIME)
-- ARGV[1]  the cap: the most slots held at once
-- ARGV[2]  the lease TTL in ms: a slot not renewed (group_renew.lua) for
--          this long lapses, as the lease of the call's event does
-- ARGV[3..] the tokens of the calls to be begun (at most 1000), in the
--          order slots go to them
--
-- Slots whose lease has ended are removed first. Then the tokens get slots
-- in order while the cap leaves room; a token that holds one already (the
-- call was sent again after its reply was lost) keeps it, so the tokens
-- holding slots are always the first ones. Each slot is freed by
-- group_free.lua when its call ends, or lapses.
-- Reply: how many of the tokens, from the first, hold a slot (integer).
local key = KEYS[1]
local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
call('ZREMRANGEBYSCORE', key, '-inf', now)
local free = tonumber(ARGV[1]) - call('ZCARD', key)
local held = call('ZMSCORE', key, unpack(ARGV, 3))
local ends = now + tonumber(ARGV[2])
local add, n = {}, 0
for i = 1, #held do
  if not held[i] then
    if free <= 0 then
      break
    end
    free = free - 1
    add[#add + 1] = ends
    add[#add + 1] = ARGV[i + 2]
  end
  n = i
end
if #add > 0 then
  call('ZADD', key, unpack(add))
end
return n
