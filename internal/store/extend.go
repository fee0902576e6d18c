package store

import (
	"context"
	"time"
)

// extend.go serves extend.lua: Set.Extend of a live member's deadline.

// extendCall builds extend.lua's call: member's deadline pushed to now+ttl
// ms. The common call sends ttl and member alone.
func (s *Store) extendCall(owner, member string, ttl int64) *Call {
	args := []any{ttl, member}
	if s.flags != "" || s.clock != nil {
		args = append(args, s.flags, s.now())
	}
	return &Call{Op: "extend", Shard: s.ShardOf(owner), Script: scriptExtend, Keys: s.ownerKeys(owner), Args: args}
}

// Extend runs extend.lua and returns the member's deadline; found is false
// when the member is absent or expired.
func (s *Store) Extend(ctx context.Context, owner, member string, ttl int64) (deadline time.Time, found bool, err error) {
	v, err := s.run(ctx, s.extendCall(owner, member, ttl))
	if err != nil {
		return time.Time{}, false, err
	}
	return readDeadline("extend.lua", v)
}
