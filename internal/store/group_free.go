package store

import (
	"context"
	"strconv"
)

// group_free.go serves group_free.lua: the freeing of a capped group's
// call slots (Set.Consume's lease keeper, WithGroupConcurrency).

// GroupFreeCall builds group_free.lua's call freeing the slots of g held
// by tokens (1 to MaxBatch).
func (s *Store) GroupFreeCall(g GroupSlots, tokens []string) *Call {
	args := tokenArgs(append(make([]any, 0, 1+len(tokens)), strconv.Itoa(g.Cap)), tokens)
	return &Call{Op: "free", Shard: -1, Script: scriptGroupFree, Keys: []string{g.Key}, Args: args}
}

// ReadGroupFree reads the reply of c, a group_free.lua call: how many
// slots it freed.
func ReadGroupFree(c *Call) (int, error) {
	if c.Err != nil {
		return 0, c.Err
	}
	n, ok := Int64(c.Reply)
	if !ok || n < 0 {
		return 0, Unexpected("group_free.lua", c.Reply)
	}
	return int(n), nil
}

// GroupFree frees the slots of g held by tokens, in one call, and returns
// how many it freed.
func (s *Store) GroupFree(ctx context.Context, g GroupSlots, tokens []string) (int, error) {
	c := s.GroupFreeCall(g, tokens)
	s.Run(ctx, c)
	return ReadGroupFree(c)
}
