-- open.lua: record a set's configuration the first time it is opened, and
-- return what is recorded (New, Open).
--
-- KEYS[1]  expset:{name}:meta   a string such as "v1 shards=16 events=0 payloads=0"
-- ARGV[1]  the configuration of the caller
--
-- Reply: the recorded configuration (the caller's, when it was first).
local v = redis.call('GET', KEYS[1])
if v then
  return v
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
