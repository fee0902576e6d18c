package expset

import (
	"context"
	"fmt"
	"sort"
)

// The handler calls under way per owner, for operators: Set.Running, and
// the totals in GroupInfo (Set.Groups).

// OwnerCalls is one owner's handler calls under way in a consumer group
// (Set.Running).
type OwnerCalls struct {
	Owner string
	Calls int64
}

// maxRunningOwners is the most owners Running lists.
const maxRunningOwners = 10_000

// Running returns the owners with handler calls under way in consumer group
// group that hold an owner slot (WithOwnerConcurrency), with how many each:
// most calls first, then by owner, at most n of them (1 to 10,000).
// GroupInfo.Running and RunningOwners (Set.Groups) give the totals. The
// slot of a consumer that died counts until another consumer of the group
// claims its event, once its lease TTL has passed unrenewed. Calls of a
// Consume without WithOwnerConcurrency hold no slot and are not seen. It
// returns an error matching ErrNotFound when no shard's stream has the
// group. Running only reads, and is safe for concurrent use. Cost: one
// pipelined script call per shard (one round trip per node on a cluster),
// and one more round per about 1000 owners with calls under way on the
// busiest shard.
func (s *Set) Running(ctx context.Context, group string, n int) ([]OwnerCalls, error) {
	if err := s.eventsOnly("list the calls running"); err != nil {
		return nil, err
	}
	if err := validateConsumerName(group); err != nil {
		return nil, err
	}
	if n < 1 || n > maxRunningOwners {
		return nil, fmt.Errorf("%w: Running's n %d: want 1 to %d owners", ErrInvalidArgument, n, maxRunningOwners)
	}
	running, found, err := s.st.Running(ctx, group)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: set %q has no consumer group %q", ErrNotFound, s.name, group)
	}
	out := make([]OwnerCalls, 0, len(running[group]))
	for o, c := range running[group] {
		out = append(out, OwnerCalls{Owner: o, Calls: c})
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Calls != out[b].Calls {
			return out[a].Calls > out[b].Calls
		}
		return out[a].Owner < out[b].Owner
	})
	return out[:min(n, len(out))], nil
}
