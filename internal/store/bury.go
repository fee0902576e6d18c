package store

import "context"

// bury.go serves bury.lua: an event whose handler call failed, or that
// cannot be read as an event, moved to the dead-letter stream
// (Set.Consume, Reservation.Finish).

// BuryArgs is one bury.lua call's own arguments.
type BuryArgs struct {
	Shard int
	Lease Lease // the entry, and the token of the call that failed ("" for an entry no call began)
	Need  int   // the attempts it must have used: WithMaxAttempts, or 0
	// Reason is the last error's text, kept in the dead letter.
	Reason string
}

// buryCall builds bury.lua's call for c and a.
func (s *Store) buryCall(c Consumer, a BuryArgs) *Call {
	sk := &s.shards[a.Shard]
	args := []any{c.Group, c.Name, a.Lease.ID, a.Need, a.Reason, a.Lease.Token}
	return &Call{Op: "bury", Shard: a.Shard, Script: scriptBury, Keys: []string{sk.Events, sk.Dead, sk.Att, sk.Runo}, Args: args}
}

// readBury reads bury.lua's reply: 1 when buried, 0 when not. Any other
// reply counts as not buried.
func readBury(v any) bool {
	n, _ := Int64(v)
	return n == 1
}

// Bury runs bury.lua for c and a, and reports whether the event was
// buried.
func (s *Store) Bury(ctx context.Context, c Consumer, a BuryArgs) (bool, error) {
	v, err := s.run(ctx, s.buryCall(c, a))
	return readBury(v), err
}
