package store

import (
	"context"
	"time"
)

// add.go serves add.lua: Set.Add's upsert of one member.

// addCall builds add.lua's call: member into owner's set with the deadline
// now+ttl ms, with payload when hasPayload. The common call sends ttl and
// member alone.
func (s *Store) addCall(owner, member string, ttl int64, payload []byte, hasPayload bool) *Call {
	args := []any{ttl, member}
	if hasPayload {
		args = append(args, s.flags+"P", s.now(), owner, payload)
	} else if s.flags != "" || s.clock != nil {
		args = append(args, s.flags, s.now(), owner)
	}
	return &Call{Op: "add", Shard: s.ShardOf(owner), Script: scriptAdd, Keys: s.ownerKeys(owner), Args: args}
}

// readAdd reads add.lua's reply: the deadline written.
func readAdd(v any) (time.Time, error) {
	d, ok := Int64(v)
	if !ok {
		return time.Time{}, Unexpected("add.lua", v)
	}
	return msTime(d), nil
}

// Add runs add.lua and returns the member's deadline and whether
// WithDurability's acknowledgements came (false without WithDurability).
func (s *Store) Add(ctx context.Context, owner, member string, ttl int64, payload []byte, hasPayload bool) (deadline time.Time, durable bool, err error) {
	c := s.addCall(owner, member, ttl, payload, hasPayload)
	s.runWrite(ctx, c, true, func(any) bool { return true })
	if c.Err != nil {
		return time.Time{}, false, c.Err
	}
	d, err := readAdd(c.Reply)
	return d, c.Durable, err
}
