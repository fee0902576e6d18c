-- payload.lua: the payload stored with a live member (Set.Payload).
--
-- KEYS[1]  owner sorted set      expset:{name:S}:o:<owner>
-- KEYS[4]  owner payload hash    expset:{name:S}:p:<owner>
--          (KEYS[2], KEYS[3], the shard's index and stream, come with the
--          owner scripts' common key list; reading never needs them. A set
--          with no flags declares KEYS[1] only, and has no payloads.)
-- ARGV[1]  now in ms, or "" for the server's TIME
-- ARGV[2]  member
--
-- Reply: {deadline, payload} with payload false when none was stored, or
-- false when the member is absent or expired.
local s = call('ZSCORE', KEYS[1], ARGV[2])
if not s or tonumber(s) <= now_ms(ARGV[1]) then
  return false
end
local p = false
if KEYS[4] then
  p = call('HGET', KEYS[4], ARGV[2])
end
return {tonumber(s), p}
