package store

import "context"

// cancel.go serves cancel.lua: Set.Cancel's look for a job's event, after
// cancel_waiting.lua found it not in its bucket.

// cancelCall builds cancel.lua's call on job id of owner ("": none) from
// where ("+", or a cursor it returned), with the receipt of
// cancel_waiting.lua's call, lasting ms.
func (s *Store) cancelCall(owner, id, where, receipt string, ms int64) *Call {
	shard, owner, _ := s.jobKeys(owner, id)
	sk := &s.shards[shard]
	return &Call{Op: "cancel", Shard: shard, Script: scriptCancel, Keys: []string{sk.Events, sk.Att, receipt},
		Args: []any{id, owner, where, JobScanCount, ms}}
}

// readCancel reads cancel.lua's reply: {0}, {1} or {2} (done: cancelled
// unless 0), or {4, cursor} to call again from cursor (more).
func readCancel(v any) (cancelled bool, cursor string, more bool, err error) {
	xs, ok := v.([]any)
	if !ok || len(xs) == 0 {
		return false, "", false, Unexpected("cancel.lua", v)
	}
	kind, ok := Int64(xs[0])
	switch {
	case !ok:
	case kind >= 0 && kind <= 2 && len(xs) == 1:
		return kind > 0, "", false, nil
	case kind == 4 && len(xs) == 2:
		if cursor, ok = String(xs[1]); ok {
			return false, cursor, true, nil
		}
	}
	return false, "", false, Unexpected("cancel.lua", v)
}

// cancelEvent runs cancel.lua until it answers.
func (s *Store) cancelEvent(ctx context.Context, owner, id, receipt string, ms int64) (bool, error) {
	where := "+"
	for {
		v, err := s.run(ctx, s.cancelCall(owner, id, where, receipt, ms))
		if err != nil {
			return false, err
		}
		cancelled, cursor, more, err := readCancel(v)
		if err != nil || !more {
			return cancelled, err
		}
		where = cursor
	}
}
