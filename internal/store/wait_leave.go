package store

import "context"

// wait_leave.go serves wait_leave.lua: a waiter of AcquireWait leaving its
// owner's line.

// waitLeaveCall builds wait_leave.lua's call: ticket out of owner's line.
func (s *Store) waitLeaveCall(owner, ticket string) *Call {
	return &Call{Op: "wait-leave", Shard: s.ShardOf(owner), Script: scriptWaitLeave, Keys: s.waitKeys(owner), Args: []any{s.now(), ticket}}
}

// WaitLeave runs wait_leave.lua; its reply carries nothing to read.
func (s *Store) WaitLeave(ctx context.Context, owner, ticket string) error {
	_, err := s.run(ctx, s.waitLeaveCall(owner, ticket))
	return err
}
