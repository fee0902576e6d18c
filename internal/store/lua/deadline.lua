-- deadline.lua: a live member's deadline (Set.Deadline, Set.Contains).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  member
--
-- Reply: the deadline in ms (integer), or false when absent or expired.
local s = call('ZSCORE', KEYS[1], ARGV[2])
if not s then
  return false
end
local d = tonumber(s)
if d <= now_ms(ARGV[1]) then
  return false
end
return d
