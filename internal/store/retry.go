package store

import (
	"context"
	"time"
)

// retry.go serves retry.lua: the next handler call of an event whose call
// failed, scheduled after a retry delay (Set.Consume, Reservation.Finish).

// retryCall builds retry.lua's call for c: the event of lease on shard
// delivered again after delay (sent in whole ms, rounded down).
func (s *Store) retryCall(c Consumer, shard int, lease Lease, delay time.Duration) *Call {
	args := []any{c.Group, c.Name, lease.ID, delay.Milliseconds(), c.leaseMs(), lease.Token}
	return &Call{Op: "retry", Shard: shard, Script: scriptRetry, Keys: s.leaseKeys(shard), Args: args}
}

// readRetry reads retry.lua's reply: 1 when scheduled, 0 when the lease is
// no longer the call's. Any other reply counts as not scheduled.
func readRetry(v any) bool {
	n, _ := Int64(v)
	return n == 1
}

// Retry runs retry.lua: the event of lease on shard, whose call failed, is
// delivered again to c's group after delay (in whole ms: round it up
// first, so that it is never early). It reports false when the lease is
// no longer the call's (nothing changed).
func (s *Store) Retry(ctx context.Context, c Consumer, shard int, lease Lease, delay time.Duration) (bool, error) {
	v, err := s.run(ctx, s.retryCall(c, shard, lease, delay))
	if err != nil {
		return false, err
	}
	return readRetry(v), nil
}
