package store

import (
	"context"
	"time"
)

// wait_renew.go serves wait_renew.lua: AcquireWait's keep-alive of the
// tickets in an owner's line.

// waitKeys returns the keys of owner's wait: its ticket leases, then its
// line.
func (s *Store) waitKeys(owner string) []string {
	sk := &s.shards[s.ShardOf(owner)]
	return []string{sk.Leases + owner, sk.Line + owner}
}

// waitRenewCall builds wait_renew.lua's call: tickets (at most MaxBatch) of
// owner's line leased for lease more.
func (s *Store) waitRenewCall(owner string, lease time.Duration, tickets []string) *Call {
	args := make([]any, 0, 2+len(tickets))
	args = append(args, s.now(), lease.Milliseconds())
	for _, t := range tickets {
		args = append(args, t)
	}
	return &Call{Op: "wait-renew", Shard: s.ShardOf(owner), Script: scriptWaitRenew, Keys: s.waitKeys(owner), Args: args}
}

// Renewed is wait_renew.lua's reply: the line's head ("" when none) and
// the tickets given that are no longer in the line (lapsed, or admitted meanwhile).
type Renewed struct {
	Head string
	Lost []string
}

// readWaitRenew reads wait_renew.lua's reply: {head, lapsed...}.
func readWaitRenew(v any) (Renewed, error) {
	xs, ok := v.([]any)
	if !ok || len(xs) < 1 {
		return Renewed{}, Unexpected("wait_renew.lua", v)
	}
	var r Renewed
	r.Head, _ = String(xs[0])
	for _, e := range xs[1:] {
		if t, _ := String(e); t != "" {
			r.Lost = append(r.Lost, t)
		}
	}
	return r, nil
}

// WaitRenew runs wait_renew.lua for tickets of owner's line.
func (s *Store) WaitRenew(ctx context.Context, owner string, lease time.Duration, tickets []string) (Renewed, error) {
	v, err := s.run(ctx, s.waitRenewCall(owner, lease, tickets))
	if err != nil {
		return Renewed{}, err
	}
	return readWaitRenew(v)
}
