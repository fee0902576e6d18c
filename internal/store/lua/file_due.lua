-- file_due.lua: file_due, a write's filing of an owner in its shard's due
-- index, for the scripts that add a deadline without lib.lua (put,
-- reschedule, acquire_plain). Shared code, not a script: scripts.go places
-- it after prelude.lua.

-- file_due files owner in the due index due at deadline ds (a string) unless
-- it is filed at or before it (ZADD LT: the entry stays at or before the
-- owner's earliest member). When that filing made the owner the index's
-- head (the shard's next deadline moved earlier; ZRANGE 0 0 reads its name,
-- no score to format), ds is published on due .. ':wake' (notify.go), so the
-- sleeping sweepers wake for it: SPUBLISH, or PUBLISH where it is missing
-- (miniredis, Redis 6).
local function file_due(due, owner, ds)
  if call('ZADD', due, 'LT', 'CH', ds, owner) == 1 and call('ZRANGE', due, '0', '0')[1] == owner then
    local ch = due .. ':wake'
    local ok = redis.pcall('SPUBLISH', ch, ds)
    if type(ok) == 'table' and ok.err then
      call('PUBLISH', ch, ds)
    end
  end
end
