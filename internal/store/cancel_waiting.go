package store

import "context"

// cancel_waiting.go serves cancel_waiting.lua: Set.Cancel's first call, on
// a job still in its bucket.

// cancelWaitingCall builds cancel_waiting.lua's call: job id of owner
// ("": none) out of its owner's set (its bucket's without an owner), with
// the call's receipt, lasting ms (0: none).
func (s *Store) cancelWaitingCall(owner, id, receipt string, ms int64) *Call {
	shard, owner, keys := s.jobKeys(owner, id)
	sk := &s.shards[shard]
	keys = []string{keys[0], receipt}
	if s.payloads {
		keys = append(keys, sk.Payload+owner)
	}
	return &Call{Op: "cancel", Shard: shard, Script: scriptCancelWaiting, Keys: keys, Args: []any{id, ms}}
}

// readCancelWaiting reads cancel_waiting.lua's reply: 1 removed from the
// bucket, 2 its event deleted (a retried call), 0 not in its bucket.
func readCancelWaiting(v any) (int64, error) {
	kind, ok := v.(int64)
	if !ok || kind < 0 || kind > 2 {
		return 0, Unexpected("cancel_waiting.lua", v)
	}
	return kind, nil
}

// Cancel runs cancel_waiting.lua on job id of owner ("": none), then,
// when the job was not waiting, cancel.lua until it answers, with one
// receipt for both, and reports whether it cancelled the job.
func (s *Store) Cancel(ctx context.Context, owner, id string) (bool, error) {
	shard, _, _ := s.jobKeys(owner, id)
	receipt, ms := s.receiptKey(shard), s.JobReceiptMillis()
	v, err := s.run(ctx, s.cancelWaitingCall(owner, id, receipt, ms))
	if err != nil {
		return false, err
	}
	if kind, err := readCancelWaiting(v); err != nil || kind > 0 {
		return kind > 0, err
	}
	return s.cancelEvent(ctx, owner, id, receipt, ms)
}
