-- wait_gate.lua: the wait line of an owner (Quota.AcquireWait), shared by
-- acquire.lua, remove.lua, wait_renew.lua and wait_leave.lua. It is placed
-- between the prelude and the script body at load time (scripts.go), and
-- builds its helpers only when a line exists, so a call on an owner nobody
-- waits for pays for one local function definition and nothing else.
--
-- An owner's line is two keys with the shard's hash tag:
--   line    expset:{name:S}:w:<owner>   zset  ticket -> arrival number (1, 2, ...)
--   leases  expset:{name:S}:wl:<owner>  zset  ticket -> lease deadline (ms)
-- A ticket whose lease has passed is dead: its waiter crashed or stalled
-- and lost its place. Both keys expire one lease after their last write, so
-- a line whose every waiter died vanishes on its own.
--
-- Only the head of the line (rank 0) is ever admitted, so admission order is
-- arrival order. Whenever the head may be able to go (a slot freed, or the
-- head changed), the head's ticket is published on the shard's wake channel,
-- expset:{name:S}:wake, derived from the line key (same hash tag, so the
-- sharded channel lives on the shard's node): SPUBLISH on Redis 7.0+, or
-- PUBLISH where SPUBLISH is missing (miniredis, Redis 6).
local waitlib_
local function waitlib()
  if waitlib_ then
    return waitlib_
  end
  local call = redis.call -- a local, not the prelude's: see lib()
  local W = {}

  -- W.publish sends ticket on line's shard wake channel.
  function W.publish(line, ticket)
    local ch = string.sub(line, 1, string.find(line, '}', 1, true)) .. ':wake'
    local ok = redis.pcall('SPUBLISH', ch, ticket)
    if type(ok) == 'table' and ok.err then
      call('PUBLISH', ch, ticket)
    end
  end

  -- W.wake_head publishes the head's ticket, if the line has one.
  function W.wake_head(line)
    local h = call('ZRANGE', line, '0', '0')[1]
    if h then
      W.publish(line, h)
    end
  end

  -- W.purge removes up to 100 dead tickets (lease <= now) and reports
  -- whether the head was among them.
  function W.purge(line, leases, now)
    local dead = call('ZRANGE', leases, '-inf', now, 'BYSCORE', 'LIMIT', '0', '100')
    if #dead == 0 then
      return false
    end
    local head = call('ZRANGE', line, '0', '0')[1]
    call('ZREM', line, unpack(dead))
    call('ZREM', leases, unpack(dead))
    for i = 1, #dead do
      if dead[i] == head then
        return true
      end
    end
    return false
  end

  -- W.gate decides whether an admission may take a slot while the owner
  -- has count live members of limit. It returns nil to admit, or the
  -- caller's rank in the line to deny. A plain call (ticket false) is
  -- denied when the line would need every free slot (rank -1). A waiter's
  -- call joins the line at the back if its ticket is not in it (first
  -- call, or its lease lapsed), renews its lease, and is admitted only as
  -- the head with a free slot: its ticket leaves the line and the next head
  -- is told.
  function W.gate(line, leases, ticket, lease, count, limit, now)
    if not ticket then
      if call('ZCARD', line) >= limit - count then
        return -1
      end
      return nil
    end
    local purged = W.purge(line, leases, now)
    local rank = call('ZRANK', line, ticket)
    if not rank then
      local last = call('ZRANGE', line, '-1', '-1', 'WITHSCORES')[2]
      local seq = 1
      if last then
        seq = tonumber(last) + 1
      end
      call('ZADD', line, seq, ticket)
      rank = call('ZCARD', line) - 1
    end
    if rank == 0 and count < limit then
      call('ZREM', line, ticket)
      call('ZREM', leases, ticket)
      W.wake_head(line)
      return nil
    end
    if purged and rank > 0 then
      W.wake_head(line)
    end
    call('ZADD', leases, now + tonumber(lease), ticket)
    call('PEXPIRE', line, lease)
    call('PEXPIRE', leases, lease)
    return rank
  end

  waitlib_ = W
  return W
end
