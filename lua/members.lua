-- members.lua: live members of one owner, earliest deadline first (Set.Members).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  the most members to return (0: all)
--
-- Reply: a flat list member1, deadline1, member2, deadline2, ... where each
-- deadline is the score as Redis formats it (an exact integer string).
local lo = '(' .. string.format('%d', now_ms(ARGV[1]))
local max = tonumber(ARGV[2])
if max > 0 then
  return call('ZRANGE', KEYS[1], lo, '+inf', 'BYSCORE', 'LIMIT', 0, max, 'WITHSCORES')
end
return call('ZRANGE', KEYS[1], lo, '+inf', 'BYSCORE', 'WITHSCORES')
