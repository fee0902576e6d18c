package store

import "time"

// put_now.go serves put_now.lua (Set.Put with delay 0).

// putNowCall builds put_now.lua's call on job id of owner ("": none), due
// at once, with payload when hasPayload: with WithClock, ARGV[3] (the
// payload, or "" without one), now as ARGV[4] and, with a payload, "p" as
// ARGV[5].
func (s *Store) putNowCall(owner, id string, payload []byte, hasPayload bool) *Call {
	shard, _, keys := s.jobKeys(owner, id)
	keys = []string{keys[0], s.shards[shard].Events, s.receiptKey(shard)}
	args := []any{id, s.JobReceiptMillis()}
	switch {
	case s.clock != nil && hasPayload:
		args = append(args, payload, s.now(), "p")
	case s.clock != nil:
		args = append(args, "", s.now())
	case hasPayload:
		args = append(args, payload)
	}
	return &Call{Op: "put", Shard: shard, Script: scriptPutNow, Keys: keys, Args: args}
}

// readPutNow reads put_now.lua's reply, put.lua's: 2 x due time + 1 when
// put.
func readPutNow(v any) (due time.Time, put bool, err error) {
	return readDue("put_now.lua", v)
}
