package store

import (
	"context"
	"time"
)

// deadline.go serves deadline.lua: Set.Deadline (and Contains) of a member.

// deadlineCall builds deadline.lua's call: member's deadline in owner's set.
func (s *Store) deadlineCall(owner, member string) *Call {
	return &Call{Op: "deadline", Shard: s.ShardOf(owner), Script: scriptDeadline, Keys: s.ownerKeys(owner)[:1], Args: []any{s.now(), member}}
}

// readDeadline reads the reply of script (deadline.lua, extend.lua): a
// member's deadline in ms, or false (nil here, found false) when the member
// is absent or expired.
func readDeadline(script string, v any) (deadline time.Time, found bool, err error) {
	if v == nil {
		return time.Time{}, false, nil
	}
	d, ok := Int64(v)
	if !ok {
		return time.Time{}, false, Unexpected(script, v)
	}
	return msTime(d), true, nil
}

// Deadline runs deadline.lua and returns the member's deadline; found is
// false when the member is absent or expired.
func (s *Store) Deadline(ctx context.Context, owner, member string) (deadline time.Time, found bool, err error) {
	v, err := s.run(ctx, s.deadlineCall(owner, member))
	if err != nil {
		return time.Time{}, false, err
	}
	return readDeadline("deadline.lua", v)
}
