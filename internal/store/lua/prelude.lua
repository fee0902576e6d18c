-- prelude.lua: the constants every expset script shares. Each
-- script is this file, then the shared files it names, then its own file,
-- joined unchanged at load time (script() in scripts.go), so each EVALSHA
-- runs one self-contained script.
--
-- Conventions every script follows:
--   * "now" is given in Unix milliseconds, or "" to read the server's TIME:
--     ARGV[1], except in the scripts of the write path (acquire, add,
--     extend, remove), which put the arguments of their common path first
--     (see their headers).
--   * Scores are deadlines in whole Unix milliseconds (< 2^53, exact in a
--     double). Numbers reach redis.call as arguments (formatted with 17 digits)
--     or are returned as integer replies; none passes through tostring or "..".
--   * A member is live while its deadline > now; at deadline <= now it is expired.
--   * Flags are single letters in one ARGV string:
--       e  expiry events on: every expired member removed gets one stream entry
--       i  the shard's due index is kept (always with e; WithSweepIndex)
--       p  payloads on: owner payload hashes exist and go with their members
--       P  this call carries a payload
--       v  (acquire) evict the earliest-deadline members instead of denying
--       r  (acquire) a live re-acquire refreshes the deadline
local call = redis.call

-- Every redis.call, every closure and every global lookup costs measurable
-- time on each run (the script body runs afresh on every EVALSHA), so the
-- common paths call as little as they can and build no closure: the
-- helpers of the rarer paths are built on first use (lib(), in lib.lua),
-- and the shared files (lib.lua, now.lua, wait_gate.lua, quota.lua,
-- groups.lua) go only into the scripts that use them. bench/README.md has
-- the numbers.

-- TTL_BUCKET (ms): the owner key of a set without events expires at the end
-- of its latest deadline's bucket, (floor(d / TTL_BUCKET) + 1) * TTL_BUCKET,
-- so a write whose deadline falls in the bucket of the latest one already
-- there need not touch the key's TTL. Every script that writes a deadline
-- keeps the key's TTL at least that far (never shortening it): a key lives
-- at most one bucket (16.4 s) past the latest deadline it was given.
-- ttlBucket in Go; TestTTLBucketMatchesLua keeps the two equal.
local TTL_BUCKET = 16384

-- MAX_BATCH is the most items one script call takes or handles: members
-- removed, dropped or evicted, owners swept, entries acknowledged or kicked
-- (unpack stops near 8000 values on Redis, 5000 on miniredis). It is
-- maxBatch in scripts.go; TestMaxBatchMatchesLua keeps the two equal.
-- BYTES_MAX bounds the bytes one call moves: payloads read, deleted or
-- copied into the stream, and the members and owners of the stream entries
-- it writes. A call may exceed BYTES_MAX by one member (a payload is at most
-- 1 MiB), so no script holds the server for long whatever the data
-- (docs/design.md has the numbers).
local MAX_BATCH = 1000
local BYTES_MAX = 1048576
-- ENTRY_COST is what one stream entry costs beyond its member, owner and
-- payload, counted against BYTES_MAX.
local ENTRY_COST = 64
