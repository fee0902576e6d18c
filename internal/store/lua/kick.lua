-- kick.lua: put dead letters back on the event stream as fresh events
-- (Set.Kick).
--
-- KEYS[1]  shard dead-letter stream  expset:{name:S}:dead
-- KEYS[2]  shard event stream        expset:{name:S}:ev
-- ARGV[1..] dead-letter entry IDs (at most 1000)
--
-- Each dead letter becomes a new entry with the event's fields (o, m, d, p, r)
-- and g, the consumer group that buried it: that group delivers it again
-- from attempt 1, and every other group, which handled the event already,
-- acknowledges it without a handler call. It leaves the dead-letter stream in
-- the same step.
-- A call that kicked any publishes one empty message on the stream's
-- wake-up channel, KEYS[2] .. ':wake' (notify.go), which wakes the
-- consumers.
-- Reply: how many dead letters were found and kicked (integer).
local dead, stream = KEYS[1], KEYS[2]
local n = 0
for i = 1, #ARGV do
  local e = call('XRANGE', dead, ARGV[i], ARGV[i])
  if e[1] then
    local f = e[1][2]
    local args = {}
    for j = 1, #f, 2 do
      local k = f[j]
      if k == 'o' or k == 'm' or k == 'd' or k == 'p' or k == 'r' or k == 'g' then
        args[#args + 1] = k
        args[#args + 1] = f[j + 1]
      end
    end
    call('XADD', stream, '*', unpack(args))
    call('XDEL', dead, ARGV[i])
    n = n + 1
  end
end
if n > 0 then
  lib().wake(stream, '') -- events appended: wake the consumers
end
return n
