package store

import (
	"context"
	"time"
)

// put.go serves put.lua (Set.Put), reschedule.lua and reschedule_now.lua
// (Set.Reschedule).

// putCall builds put.lua's call on job id of owner ("": none), due after
// ms, with payload when hasPayload: with WithClock, ARGV[4] (a payload's
// place, empty without one) and now as ARGV[5].
func (s *Store) putCall(owner, id string, ms int64, payload []byte, hasPayload bool) *Call {
	shard, owner, keys := s.jobKeys(owner, id)
	sk := &s.shards[shard]
	keys = []string{keys[0], sk.Due, s.receiptKey(shard)}
	args := []any{ms, id, s.JobReceiptMillis()}
	if s.clock != nil {
		args = append(args, "", s.now())
	}
	if hasPayload {
		keys = append(keys, sk.Payload+owner)
		if len(args) == 3 {
			args = append(args, payload)
		} else {
			args[3] = payload
		}
	}
	return &Call{Op: "put", Shard: shard, Script: scriptPut, Keys: keys, Args: args}
}

// rescheduleCall builds reschedule.lua's call on job id of owner ("":
// none), due after ms: with WithClock, now as ARGV[4].
func (s *Store) rescheduleCall(owner, id string, ms int64) *Call {
	shard, _, keys := s.jobKeys(owner, id)
	keys = []string{keys[0], s.shards[shard].Due, s.receiptKey(shard)}
	args := []any{ms, id, s.JobReceiptMillis()}
	if s.clock != nil {
		args = append(args, s.now())
	}
	return &Call{Op: "reschedule", Shard: shard, Script: scriptReschedule, Keys: keys, Args: args}
}

// rescheduleNowCall builds reschedule_now.lua's call on job id of owner
// ("": none), due at once: with WithClock, now as ARGV[3]; with payloads,
// the owner's payload hash as KEYS[4].
func (s *Store) rescheduleNowCall(owner, id string) *Call {
	shard, owner, keys := s.jobKeys(owner, id)
	sk := &s.shards[shard]
	keys = []string{keys[0], sk.Events, s.receiptKey(shard)}
	if s.payloads {
		keys = append(keys, sk.Payload+owner)
	}
	args := []any{id, s.JobReceiptMillis()}
	if s.clock != nil {
		args = append(args, s.now())
	}
	return &Call{Op: "reschedule", Shard: shard, Script: scriptRescheduleNow, Keys: keys, Args: args}
}

// readPut reads put.lua's reply: 2 x deadline + 1 when put.
func readPut(v any) (due time.Time, put bool, err error) { return readDue("put.lua", v) }

// readDue reads the reply of put.lua or put_now.lua (script): one integer,
// 2 x deadline + 1 when put, 2 x the waiting job's deadline when not.
func readDue(script string, v any) (due time.Time, put bool, err error) {
	n, ok := v.(int64)
	if !ok {
		return time.Time{}, false, Unexpected(script, v)
	}
	return msTime(n >> 1), n&1 == 1, nil
}

// putWrote reports whether a reply of put.lua or put_now.lua put the job.
func putWrote(v any) bool {
	n, _ := v.(int64)
	return n&1 == 1
}

// Put runs put.lua: job id of owner ("": none) due after ms, unless a job
// of that owner and ID is waiting; with ms 0, put_now.lua, which writes
// the job's event at once. It returns the job's due time, whether it put
// it, and whether WithDurability's acknowledgements came. An error of the
// call names the owner's key (a bucket's for a job without an owner, which
// the caller does not show).
func (s *Store) Put(ctx context.Context, owner, id string, ms int64, payload []byte, hasPayload bool) (due time.Time, put, durable bool, err error) {
	var c *Call
	read := readPut
	if ms == 0 {
		c, read = s.putNowCall(owner, id, payload, hasPayload), readPutNow
	} else {
		c = s.putCall(owner, id, ms, payload, hasPayload)
	}
	s.runWrite(ctx, c, true, putWrote)
	if c.Err != nil {
		return time.Time{}, false, false, c.Err
	}
	due, put, err = read(c.Reply)
	return due, put, c.Durable, err
}

// readReschedule reads the reply of reschedule.lua or reschedule_now.lua:
// the new due time, or false (nil here, found false) when the job is not
// waiting.
func readReschedule(v any) (due time.Time, found bool, err error) {
	if v == nil {
		return time.Time{}, false, nil
	}
	d, ok := Int64(v)
	if !ok {
		return time.Time{}, false, Unexpected("reschedule.lua", v)
	}
	return msTime(d), true, nil
}

// Reschedule runs reschedule.lua: the waiting job id of owner ("": none)
// due after ms instead; with ms 0, reschedule_now.lua, which writes the
// job's event at once. found is false when the job is not waiting. An
// error of the call names the owner's key, as Put's does.
func (s *Store) Reschedule(ctx context.Context, owner, id string, ms int64) (due time.Time, found, durable bool, err error) {
	var c *Call
	if ms == 0 {
		c = s.rescheduleNowCall(owner, id)
	} else {
		c = s.rescheduleCall(owner, id, ms)
	}
	s.runWrite(ctx, c, true, func(v any) bool { return v != nil })
	if c.Err != nil {
		return time.Time{}, false, false, c.Err
	}
	due, found, err = readReschedule(c.Reply)
	return due, found, c.Durable, err
}
