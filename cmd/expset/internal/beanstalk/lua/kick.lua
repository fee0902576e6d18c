-- kick.lua: move buried jobs (or, when none is buried, delayed jobs) to ready.
--
-- KEYS[1..8]  the tube's keys (see tube.lua)
-- ARGV[1]  at most this many (1 .. 1000)
-- ARGV[2]  'b' buried, 'd' delayed, '' buried if any is, else delayed
-- ARGV[3]  wake-up channel, ARGV[4] tube name (published there)
--
-- Buried jobs go first buried first, delayed ones soonest due first.
-- Reply: {how many were kicked, 'b' or 'd'}.
tick()
local mode = ARGV[2]
if mode == '' then
  mode = 'd'
  if call('ZCARD', KEYS[4]) > 0 then
    mode = 'b'
  end
end
local from = KEYS[2]
if mode == 'b' then
  from = KEYS[4]
end
local ids = call('ZRANGE', from, 0, tonumber(ARGV[1]) - 1)
for _, id in ipairs(ids) do
  call('ZREM', from, id)
  local m = getmeta(id)
  m[9] = m[9] + 1
  setmeta(id, m)
  makeready(id, m)
end
if #ids > 0 then
  call('PUBLISH', ARGV[3], ARGV[4])
end
return {#ids, mode}
