package store

import (
	"context"
	"strconv"
)

// group_take.go serves group_take.lua: the taking of call slots of a
// consumer group capped as a whole (Set.Consume WithGroupConcurrency).

// GroupSlots names the call slots of one consumer group capped as a whole:
// its key (GroupSlotsKey), the cap and the lease TTL of a slot, in ms.
type GroupSlots struct {
	Key     string
	Cap     int
	LeaseMs int64
}

// NewGroupSlots returns the call slots of group of the set, capped at n,
// whose slots lapse leaseMs after their last renewal.
func (s *Store) NewGroupSlots(group string, n int, leaseMs int64) GroupSlots {
	return GroupSlots{Key: GroupSlotsKey(s.name, group), Cap: n, LeaseMs: leaseMs}
}

// Wake is the channel group_free.lua publishes on when it frees a slot of
// the group at its cap.
func (g GroupSlots) Wake() string { return g.Key + ":wake" }

// tokenArgs appends tokens to args.
func tokenArgs(args []any, tokens []string) []any {
	for _, t := range tokens {
		args = append(args, t)
	}
	return args
}

// GroupTakeCall builds group_take.lua's call asking slots of g for tokens
// (1 to MaxBatch), in order.
func (s *Store) GroupTakeCall(g GroupSlots, tokens []string) *Call {
	args := tokenArgs(append(make([]any, 0, 2+len(tokens)), strconv.Itoa(g.Cap), strconv.FormatInt(g.LeaseMs, 10)), tokens)
	return &Call{Op: "take", Shard: -1, Script: scriptGroupTake, Keys: []string{g.Key}, Args: args}
}

// ReadGroupTake reads the reply of c, a group_take.lua call of n tokens:
// how many of them, from the first, hold a slot.
func ReadGroupTake(c *Call, n int) (int, error) {
	if c.Err != nil {
		return 0, c.Err
	}
	k, ok := Int64(c.Reply)
	if !ok || k < 0 || k > int64(n) {
		return 0, Unexpected("group_take.lua", c.Reply)
	}
	return int(k), nil
}

// GroupTake asks slots of g for tokens, in one call, and returns how many
// of them, from the first, hold one.
func (s *Store) GroupTake(ctx context.Context, g GroupSlots, tokens []string) (int, error) {
	c := s.GroupTakeCall(g, tokens)
	s.Run(ctx, c)
	return ReadGroupTake(c, len(tokens))
}
