package main

import (
	"context"
	"fmt"
	"time"

	"github.com/expset/expset"
)

// lifeTTL is the TTL of each member of the life workload: every member has
// expired before the sweep.
const lifeTTL = time.Millisecond

// lifeWorkload is a member's whole life at default options, counted
// together: e.n members admitted by Quota.Acquire (each its owner's first,
// on a set WithExpiryEvents), swept into events by one Sweeper.SweepOnce
// once they have expired, then handled (a no-op handler) and acknowledged
// by one Set.Consume: instructions per member, the sweep's and the
// consumer's reads, begins, acknowledgements and shutdown included.
func lifeWorkload() workload {
	return workload{name: "life/default", unit: "member",
		what: "Quota.Acquire (fresh owner, WithExpiryEvents) + Sweeper.SweepOnce + Set.Consume (defaults, no-op handler), one member's life",
		prep: func(ctx context.Context, e *env) (job, error) {
			s, err := expset.Open(ctx, e.rdb, setName, expset.WithExpiryEvents())
			if err != nil {
				return job{}, err
			}
			q, err := expset.NewQuota(s, limit)
			if err != nil {
				return job{}, err
			}
			w, err := expset.NewSweeper(s)
			if err != nil {
				return job{}, err
			}
			return job{calls: 1, units: e.n, do: func(ctx context.Context, _ int) error {
				for i := range e.n {
					d, err := q.Acquire(ctx, e.owners[i], e.members[i], lifeTTL)
					if err != nil {
						return err
					}
					if !allowedNew(d) {
						return fmt.Errorf("unexpected decision %+v", d)
					}
				}
				time.Sleep(2 * lifeTTL)
				st, err := w.SweepOnce(ctx)
				if err != nil {
					return err
				}
				if st.Expired != e.n {
					return fmt.Errorf("swept %d members, want %d", st.Expired, e.n)
				}
				return consumeAll(ctx, s, e.n, "events")
			}}, nil
		}}
}
