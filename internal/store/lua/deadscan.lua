-- deadscan.lua: read part of a dead-letter stream in one bounded step and
-- keep the entries a filter selects (the dead letters of "expset web", and
-- those of one job for Set.JobDeadLetters).
--
-- KEYS[1]  a shard's dead-letter stream  expset:{name:S}:dead
-- ARGV[1]  where to start: "-" or "(ID" (after ID)
-- ARGV[2]  where to end: "+" or an ID (inclusive)
-- ARGV[3]  entries to read at most (1 to 10000)
-- ARGV[4]  matching entries to return at most (0: none)
-- ARGV[5]  the group, exactly ("" for any)
-- ARGV[6]  the owner, exactly ("" for any)
-- ARGV[7]  text the error holds, lower case ("" for any; ASCII letters
--          compare in any case)
-- ARGV[8]  "1": stop reading at the last entry returned; "0": read on,
--          counting the matches
-- ARGV[9]  the member, exactly ("" for any)
-- Reply: {the last ID read ("" when none), entries read, matches,
--         {the matching entries returned, as XRANGE gives them}}
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
local want = tonumber(ARGV[4])
local group, owner, text, stop = ARGV[5], ARGV[6], ARGV[7], ARGV[8] == '1'
local member = ARGV[9]
local last, read, matches, out = '', 0, 0, {}
for i = 1, #entries do
  local e = entries[i]
  last, read = e[1], i
  local f, g, o, m, err = e[2], '', '', '', ''
  for j = 1, #f, 2 do
    local k = f[j]
    if k == 'g' then g = f[j + 1] elseif k == 'o' then o = f[j + 1]
    elseif k == 'm' then m = f[j + 1] elseif k == 'err' then err = f[j + 1] end
  end
  if (group == '' or g == group) and (owner == '' or o == owner) and (member == '' or m == member)
    and (text == '' or string.find(string.lower(err), text, 1, true)) then
    matches = matches + 1
    if #out < want then
      out[#out + 1] = e
      if stop and #out == want then break end
    end
  end
end
return {last, read, matches, out}
