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
// GroupInfo.Running and RunningOwners (Set.Groups) give the totals. Only
// live calls count: the slot of a consumer that died holds until its lease
// TTL has passed unrenewed, and counts no more from then. Calls of a
// Consume without WithOwnerConcurrency hold no slot and are not seen. It
// returns an error matching ErrNotFound when no shard's stream has the
// group. Running only reads, and is safe for concurrent use. Cost: one
// pipelined script call per shard (one round trip per node on a cluster),
// and one more round per 1000 calls under way on the busiest shard.
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
	running, found, err := s.running(ctx, group)
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

// running reads the live owner slots of every shard (lua/running.lua): the
// calls under way per group and owner, of group ("": every group), and
// whether group is on some shard's stream (always, for "").
func (s *Set) running(ctx context.Context, group string) (map[string]map[string]int64, bool, error) {
	out := map[string]map[string]int64{}
	found := group == ""
	offset := make([]int64, len(s.shards))
	for {
		var calls []*scriptCall
		for i, o := range offset {
			if o < 0 {
				continue
			}
			sk := &s.shards[i]
			calls = append(calls, &scriptCall{op: "running", shard: i, sc: scriptRunning,
				keys: []string{sk.run, sk.runo, sk.events}, args: []any{group, o}})
		}
		if len(calls) == 0 {
			return out, found, nil
		}
		s.runPipelined(ctx, calls)
		for _, c := range calls {
			if c.err != nil {
				return nil, false, c.err
			}
			xs, ok := c.v.([]any)
			if !ok || len(xs) < 2 || len(xs)%3 != 2 {
				return nil, false, unexpected("running.lua", c.v)
			}
			on, ok1 := asInt64(xs[0])
			more, ok2 := asInt64(xs[1])
			if !ok1 || !ok2 {
				return nil, false, unexpected("running.lua", c.v)
			}
			found = found || on == 1
			offset[c.shard] = more
			for j := 2; j < len(xs); j += 3 {
				g, ok1 := asString(xs[j])
				o, ok2 := asString(xs[j+1])
				n, ok3 := asInt64(xs[j+2])
				if !ok1 || !ok2 || !ok3 {
					return nil, false, unexpected("running.lua", c.v)
				}
				if out[g] == nil {
					out[g] = map[string]int64{}
				}
				out[g][o] += n
			}
		}
	}
}
