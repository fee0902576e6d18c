package store

import (
	"context"
	"strconv"
)

// group_renew.go serves group_renew.lua: the renewal of a capped group's
// call slots (Set.Consume's lease keeper, WithGroupConcurrency).

// GroupRenewCall builds group_renew.lua's call renewing the slots of g
// held by tokens (1 to MaxBatch).
func (s *Store) GroupRenewCall(g GroupSlots, tokens []string) *Call {
	args := tokenArgs(append(make([]any, 0, 1+len(tokens)), strconv.FormatInt(g.LeaseMs, 10)), tokens)
	return &Call{Op: "renew", Shard: -1, Script: scriptGroupRenew, Keys: []string{g.Key}, Args: args}
}

// ReadGroupRenew reads the reply of c, a group_renew.lua call of n tokens:
// whether each still held its slot (and renewed it).
func ReadGroupRenew(c *Call, n int) ([]bool, error) { return readHeld("group_renew.lua", c, n) }

// GroupRenew renews the slots of g held by tokens, in one call, and reports
// which were still held.
func (s *Store) GroupRenew(ctx context.Context, g GroupSlots, tokens []string) ([]bool, error) {
	c := s.GroupRenewCall(g, tokens)
	s.Run(ctx, c)
	return ReadGroupRenew(c, len(tokens))
}
