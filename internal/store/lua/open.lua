-- open.lua: record a set's configuration the first time it is opened, and
-- return what is recorded (Open).
--
-- KEYS[1]  set configuration     expset:{name}:meta   hash: version (1),
--          shards, and events, payloads and index as 0 or 1
-- ARGV     the caller's configuration: field1, value1, field2, value2, ...
--
-- Reply: the recorded configuration as field1, value1, ... (the caller's,
-- when it was first). A key of another type fails with WRONGTYPE.
if call('EXISTS', KEYS[1]) == 1 then
  return call('HGETALL', KEYS[1])
end
call('HSET', KEYS[1], unpack(ARGV))
return ARGV
