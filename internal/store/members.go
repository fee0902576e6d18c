package store

import (
	"context"
	"time"
)

// members.go serves members.lua: Set.Members of an owner.

// Member is a live member and its deadline.
type Member struct {
	ID       string
	Deadline time.Time
}

// membersCall builds members.lua's call: at most n of owner's live members
// (n 0: all).
func (s *Store) membersCall(owner string, n int) *Call {
	return &Call{Op: "members", Shard: s.ShardOf(owner), Script: scriptMembers, Keys: s.ownerKeys(owner)[:1], Args: []any{s.now(), n}}
}

// readMembers reads members.lua's reply: a flat member, deadline, member,
// deadline... list.
func readMembers(v any) ([]Member, error) {
	xs, ok := v.([]any)
	if !ok || len(xs)%2 != 0 {
		return nil, Unexpected("members.lua", v)
	}
	out := make([]Member, 0, len(xs)/2)
	for i := 0; i < len(xs); i += 2 {
		id, ok1 := String(xs[i])
		ms, ok2 := Int64(xs[i+1])
		if !ok1 || !ok2 {
			return nil, Unexpected("members.lua", v)
		}
		out = append(out, Member{ID: id, Deadline: msTime(ms)})
	}
	return out, nil
}

// Members runs members.lua and returns at most n of owner's live members
// (n 0: all), earliest deadline first.
func (s *Store) Members(ctx context.Context, owner string, n int) ([]Member, error) {
	v, err := s.run(ctx, s.membersCall(owner, n))
	if err != nil {
		return nil, err
	}
	return readMembers(v)
}
