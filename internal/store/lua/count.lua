-- count.lua: the number of live members of one owner (Set.Count).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- ARGV[1]  now in ms, or "" for the server's TIME
--
-- Reply: the count (integer). Expired members not yet removed do not count.
return call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now_ms(ARGV[1])), '+inf')
