-- members.lua: live members of one owner, earliest deadline first (Set.Members).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  the most members to return (0: all)
--
-- Reply: a flat list member1, deadline1, member2, deadline2, ... where each
-- deadline is the score as Redis formats it (an exact integer string).
local lo = '(' .. string.format('%d', now_ms(ARGV[1]))
-- ARGV[2] goes to LIMIT as the caller's exact decimal string: as a Lua
-- number a count near 2^63 would be formatted as "9.2233720368548e+18",
-- which ZRANGE rejects.
if tonumber(ARGV[2]) > 0 then
  return call('ZRANGE', KEYS[1], lo, '+inf', 'BYSCORE', 'LIMIT', '0', ARGV[2], 'WITHSCORES')
end
return call('ZRANGE', KEYS[1], lo, '+inf', 'BYSCORE', 'WITHSCORES')
