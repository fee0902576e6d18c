-- tube.lua: shared by every script on one tube's keys (joined before the
-- script's own text; it has no header of that kind). Every such script
-- declares the same eight keys, all with the tube's hash tag:
--
-- KEYS[1]  ready     zset  score: priority, member: 20-digit zero-padded job ID
-- KEYS[2]  delayed   zset  score: when it becomes ready (ms, Redis clock)
-- KEYS[3]  reserved  zset  score: when its time to run ends (ms, Redis clock)
-- KEYS[4]  buried    zset  score: burial sequence number (first buried first)
-- KEYS[5]  meta      hash  job ID -> "pri ttr delay created reserves timeouts
--                          releases buries kicks" (decimal integers; ttr and
--                          delay in seconds, created in ms)
-- KEYS[6]  body      hash  job ID -> body
-- KEYS[7]  owner     hash  job ID -> token of the connection that reserved it
-- KEYS[8]  stat      hash  total, deletes, timeouts, pausects, pause (s),
--                          unpause (ms), bseq
--
-- Members with one score sort by member, so the padded IDs order a priority's
-- jobs by ID. Times come from redis.call('TIME'), so every front shares one
-- clock.
local call = redis.call
local T = call('TIME')
local now = tonumber(T[1]) * 1000 + math.floor(tonumber(T[2]) / 1000)

-- getmeta returns a job's fields as numbers, or nil when it is not there.
local function getmeta(id)
  local s = call('HGET', KEYS[5], id)
  if not s then
    return nil
  end
  local m = {}
  for v in string.gmatch(s, '%S+') do
    m[#m + 1] = tonumber(v)
  end
  return m
end

-- setmeta writes a job's fields back, formatted exactly.
local function setmeta(id, m)
  local parts = {}
  for i = 1, 9 do
    parts[i] = string.format('%.0f', m[i])
  end
  call('HSET', KEYS[5], id, table.concat(parts, ' '))
end

-- tick makes due delayed jobs ready and returns the reserved jobs whose time
-- to run has ended to ready (counting a timeout), at most 100 of each, as
-- beanstalkd's own clock would have done by now.
local function tick()
  local due = call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
  for _, id in ipairs(due) do
    local m = getmeta(id)
    call('ZREM', KEYS[2], id)
    if m then
      call('ZADD', KEYS[1], m[1], id)
    end
  end
  local late = call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. now, 'LIMIT', 0, 100)
  for _, id in ipairs(late) do
    local m = getmeta(id)
    call('ZREM', KEYS[3], id)
    call('HDEL', KEYS[7], id)
    if m then
      m[6] = m[6] + 1
      setmeta(id, m)
      call('ZADD', KEYS[1], m[1], id)
      call('HINCRBY', KEYS[8], 'timeouts', 1)
    end
  end
end

-- paused reports whether the tube is paused now.
local function paused()
  local u = tonumber(call('HGET', KEYS[8], 'unpause') or '0')
  return u > now
end

-- nextevent returns how many ms from now the tube next changes by itself (a
-- delayed job due, a time to run ending, a pause ending), or -1 for never.
local function nextevent()
  local n = -1
  local d = call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if d[2] then
    n = tonumber(d[2])
  end
  local r = call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if r[2] then
    local v = tonumber(r[2]) + 1
    if n < 0 or v < n then
      n = v
    end
  end
  local u = tonumber(call('HGET', KEYS[8], 'unpause') or '0')
  if u > now and (n < 0 or u < n) then
    n = u
  end
  if n < 0 then
    return -1
  end
  return n - now
end

-- owned reports whether job id is reserved by the connection token.
local function owned(id, token)
  return call('ZSCORE', KEYS[3], id) and call('HGET', KEYS[7], id) == token
end

-- unhold takes job id out of reserved when the connection token holds it
-- and returns its fields (nil when it does not hold it).
local function unhold(id, token)
  if not owned(id, token) then
    return nil
  end
  call('ZREM', KEYS[3], id)
  call('HDEL', KEYS[7], id)
  return getmeta(id)
end

-- take reserves job id (already out of ready, delayed and buried) for the
-- connection token and returns the reserve reply {1, id, ttr, body}.
local function take(id, token)
  local m = getmeta(id)
  m[5] = m[5] + 1
  setmeta(id, m)
  call('ZADD', KEYS[3], now + m[2] * 1000, id)
  call('HSET', KEYS[7], id, token)
  return {1, id, m[2], call('HGET', KEYS[6], id)}
end

-- store stores a new job id (padded) with priority pri, delay and ttr
-- (decimal strings) and body, ready or delayed, and wakes the reserves
-- waiting on tube through channel.
local function store(id, pri, delay, ttr, body, channel, tube)
  if tonumber(delay) > 0 then
    call('ZADD', KEYS[2], now + tonumber(delay) * 1000, id)
  else
    call('ZADD', KEYS[1], pri, id)
  end
  call('HSET', KEYS[5], id, pri .. ' ' .. ttr .. ' ' .. delay .. ' ' .. string.format('%.0f', now) .. ' 0 0 0 0 0')
  call('HSET', KEYS[6], id, body)
  call('HINCRBY', KEYS[8], 'total', 1)
  call('PUBLISH', channel, tube)
end

-- makeready puts job id, with its fields m, in the ready queue.
local function makeready(id, m)
  call('ZADD', KEYS[1], m[1], id)
end
