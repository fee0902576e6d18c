-- payload.lua: the payload stored with a live member (Set.Payload).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[2]  owner payload hash    expset:{name:S}:p:<owner>
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  member
--
-- Reply: {deadline, payload} with payload false when none was stored, or
-- false when the member is absent or expired.
local s = call('ZSCORE', KEYS[1], ARGV[2])
if not s or tonumber(s) <= now_ms(ARGV[1]) then
  return false
end
return {tonumber(s), call('HGET', KEYS[2], ARGV[2])}
