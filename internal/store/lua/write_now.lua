-- write_now.lua: write_now, the event and wake-up of a job due at once, for
-- the scripts that write them (put_now, reschedule_now). Shared code, not a
-- script: scripts.go places it after prelude.lua.

-- write_now appends to stream the entry the sweeper would have written for
-- job id of the owner key key (sweep.lua): fields o (the owner, or the
-- bucket: key's tail from the position #stream + 1, the keys sharing their
-- prefix), m (id), d (ds, the due time in decimal ms) and, when p is not
-- nil, p (the payload). Then one empty message on the stream's wake-up
-- channel, stream .. ':wake' (notify.go), wakes the consumers, as a sweep
-- that wrote events does: SPUBLISH, or PUBLISH where the server has no
-- sharded channels (miniredis). It is written out here rather than taken
-- from lib.lua's L.wake: lib.lua costs every run its closure, and lib()
-- builds all its helpers.
local function write_now(key, stream, id, ds, p)
  local owner = string.sub(key, #stream + 1)
  if p then
    call('XADD', stream, '*', 'o', owner, 'm', id, 'd', ds, 'p', p)
  else
    call('XADD', stream, '*', 'o', owner, 'm', id, 'd', ds)
  end
  local ch = stream .. ':wake'
  local ok = redis.pcall('SPUBLISH', ch, '')
  if type(ok) == 'table' and ok.err then
    call('PUBLISH', ch, '')
  end
end
