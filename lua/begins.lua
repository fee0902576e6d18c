-- begins.lua: start handler calls of several expiry events of one shard at
-- once (Set.Consume WithConcurrency): each as begin.lua mode b starts one,
-- in one script call instead of one per event.
--
-- KEYS[1]  shard event stream   expset:{name:S}:ev
-- KEYS[2]  shard attempts hash  expset:{name:S}:att
-- ARGV[1]  consumer group
-- ARGV[2]  consumer
-- ARGV[3]  visibility timeout in ms
-- ARGV[4]  attempts allowed, WithMaxAttempts
-- ARGV[5]  idle time in ms under which this consumer's own lease is kept as
--          it is (a sixth of the visibility timeout)
-- ARGV[6..] pairs (at most 1000): an entry ID, and the token of its call
--          (unique to the handler call, so that a begin run twice counts once)
--
-- Each pair is begun on its own, exactly as begin.lua mode b begins one (see
-- there): the consumer makes every call it begins at once, so a count raised
-- here is a call made.
-- Reply: one item per pair, in order: {the attempt number of the call, 1 when
-- taken now or 0 when the lease taken ARGV[5] ms ago at most runs on}, or 0
-- (another consumer holds the event, it was acknowledged or trimmed), or -1
-- (every attempt is used).
local stream, att, group, consumer = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local vis, max, keep = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {}
for i = 6, #ARGV - 1, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  local r
  local holder, idle = pending_of(stream, group, id)
  if not holder or (holder ~= consumer and idle < vis) then
    r = 0
  else
    local field = att_field(id, group)
    local used, token = att_get(att, field)
    if token == tok and holder == consumer then
      r = {used, 1}
    elseif used >= max then
      r = -1
    else
      local taken = 0
      if holder ~= consumer or idle >= keep then
        if hold(stream, att, group, consumer, id) then
          taken = 1
        else
          r = 0
        end
      end
      if not r then
        call('HSET', att, field, string.format('%d', used + 1) .. ' ' .. tok)
        r = {used + 1, taken}
      end
    end
  end
  out[#out + 1] = r
end
return out
