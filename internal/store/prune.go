package store

import (
	"context"
	"strconv"
	"time"
)

// prune.go serves prune.lua: the removal of consumers that hold nothing
// from a consumer group (Set.Consume, Set.Reserve).

// pruneCall builds prune.lua's call on shard for group: the consumers idle
// at least idle (< 0: none by idle time) and leaving ("": none), each if
// it holds nothing.
func (s *Store) pruneCall(group string, shard int, idle time.Duration, leaving string) *Call {
	ms := ""
	if idle >= 0 {
		ms = strconv.FormatInt(idle.Milliseconds(), 10)
	}
	sk := &s.shards[shard]
	return &Call{Op: "prune", Shard: shard, Script: scriptPrune, Keys: []string{sk.Events}, Args: []any{group, ms, leaving}}
}

// Prune runs prune.lua on shard: it removes group's consumers that hold
// nothing and were idle at least idle (< 0: none by idle time), and
// leaving ("": none) if it holds nothing there. The reply (how many were
// removed) is not read.
func (s *Store) Prune(ctx context.Context, group string, shard int, idle time.Duration, leaving string) error {
	_, err := s.run(ctx, s.pruneCall(group, shard, idle, leaving))
	return err
}

// Leave removes consumer name from group on each of shards where it holds
// nothing: one prune.lua call per shard, all in one pipeline. It returns
// the first error.
func (s *Store) Leave(ctx context.Context, group, name string, shards []int) error {
	calls := make([]*Call, len(shards))
	for k, i := range shards {
		calls[k] = s.pruneCall(group, i, -1, name)
	}
	if len(calls) > 0 {
		s.RunPipelined(ctx, calls)
	}
	for _, c := range calls {
		if c.Err != nil {
			return c.Err
		}
	}
	return nil
}
