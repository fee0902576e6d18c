package main

import (
	"context"
	"fmt"
	"time"

	"github.com/expset/expset"
)

// seedNames are the members an owner holds before a path runs.
var seedNames = []string{"order-s0", "order-s1", "order-s2"}

// acquirePath is one Quota.Acquire path: the set's options, the quota's,
// the members each owner holds first (held: the first held of seedNames,
// or the member itself when retry), and what the decision must be.
type acquirePath struct {
	name, what string
	vs         string
	setOpts    []expset.OpenOption
	quotaOpts  []expset.QuotaOption
	callOpts   []expset.AcquireOption
	held       int
	retry      bool
	want       func(d expset.Decision) bool
}

var payload = []byte("0123456789abcdef0123456789abcdef") // 32 bytes

func allowedNew(d expset.Decision) bool { return d.Allowed && !d.Existing && len(d.Evicted) == 0 }

var acquirePaths = []acquirePath{
	{name: "fresh", what: "allowed, the owner's first member", vs: "straightforward/fresh", want: allowedNew},
	{name: "live", what: "allowed, the owner holds 1 live member", vs: "straightforward/live", held: 1, want: allowedNew},
	{name: "retry", what: "the member is already held (Existing)", vs: "straightforward/retry", held: 1, retry: true,
		want: func(d expset.Decision) bool { return d.Allowed && d.Existing }},
	{name: "denied", what: "denied at the limit, with RetryAfter", vs: "straightforward/denied", held: 3,
		want: func(d expset.Decision) bool { return !d.Allowed && d.RetryAfter > 0 }},
	{name: "evict", what: "WithEvictOldest at the limit: 1 evicted", vs: "straightforward/live", held: 3,
		quotaOpts: []expset.QuotaOption{expset.WithEvictOldest()},
		want:      func(d expset.Decision) bool { return d.Allowed && len(d.Evicted) == 1 }},
	{name: "payload", what: "WithPayloads set, 32-byte WithPayload, 1 live member", vs: "straightforward/live", held: 1,
		setOpts: []expset.OpenOption{expset.WithPayloadStorage()}, callOpts: []expset.AcquireOption{expset.WithPayload(payload)}, want: allowedNew},
	{name: "events", what: "WithExpiryEvents set, 1 live member", vs: "straightforward/live", held: 1,
		setOpts: []expset.OpenOption{expset.WithExpiryEvents()}, want: allowedNew},
	{name: "events-fresh", what: "WithExpiryEvents set, the owner's first member (due-index write)", vs: "straightforward/fresh",
		setOpts: []expset.OpenOption{expset.WithExpiryEvents()}, want: allowedNew},
	{name: "clock", what: "WithClock (no TIME), 1 live member", vs: "straightforward/live", held: 1,
		setOpts: []expset.OpenOption{expset.WithClock(time.Now)}, want: allowedNew},
}

func (p acquirePath) workload() workload {
	return workload{name: "acquire/" + p.name, unit: "call", vs: "recipe/" + p.vs, what: p.what, prep: func(ctx context.Context, e *env) (job, error) {
		s, err := expset.Open(ctx, e.rdb, setName, p.setOpts...)
		if err != nil {
			return job{}, err
		}
		q, err := expset.NewQuota(s, limit, p.quotaOpts...)
		if err != nil {
			return job{}, err
		}
		cfg, err := expset.ReadConfiguration(ctx, e.rdb, setName)
		if err != nil {
			return job{}, err
		}
		if p.retry {
			err = seedEach(ctx, e, s, func(i int) []string { return []string{e.members[i]} }, cfg)
		} else if p.held > 0 {
			err = seed(ctx, e.rdb, s, e.owners, seedNames[:p.held], time.Now().Add(ttl), !cfg.Events, cfg.Index)
		}
		if err != nil {
			return job{}, err
		}
		if _, err := q.Acquire(ctx, "warm-up", "m", ttl, p.callOpts...); err != nil {
			return job{}, err
		}
		return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error {
			d, err := q.Acquire(ctx, e.owners[i], e.members[i], ttl, p.callOpts...)
			if err != nil {
				return err
			}
			if !p.want(d) {
				return fmt.Errorf("owner %s: unexpected decision %+v", e.owners[i], d)
			}
			return nil
		}}, nil
	}}
}

// seedEach gives owner i the members of(i), live for ttl.
func seedEach(ctx context.Context, e *env, s *expset.Set, of func(i int) []string, cfg expset.Configuration) error {
	return seedOf(ctx, e.rdb, s, e.owners, of, time.Now().Add(ttl), !cfg.Events, cfg.Index)
}

// setWorkloads are Add, Remove and Extend on a default set, each owner
// holding its member (Remove, Extend) or one other (Add).
func setWorkloads() []workload {
	mk := func(name, what string, held func(e *env, i int) string, op func(ctx context.Context, s *expset.Set, owner, member string) error) workload {
		return workload{name: "set/" + name, unit: "call", vs: "recipe/straightforward/live", what: what, prep: func(ctx context.Context, e *env) (job, error) {
			s, err := expset.Open(ctx, e.rdb, setName)
			if err != nil {
				return job{}, err
			}
			cfg, err := expset.ReadConfiguration(ctx, e.rdb, setName)
			if err != nil {
				return job{}, err
			}
			if err := seedEach(ctx, e, s, func(i int) []string { return []string{held(e, i)} }, cfg); err != nil {
				return job{}, err
			}
			if _, err := s.Add(ctx, "warm-up", "m", ttl); err != nil {
				return job{}, err
			}
			if err := op(ctx, s, "warm-up", "m"); err != nil {
				return job{}, err
			}
			return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error {
				return op(ctx, s, e.owners[i], e.members[i])
			}}, nil
		}}
	}
	other := func(e *env, i int) string { return seedNames[0] }
	same := func(e *env, i int) string { return e.members[i] }
	return []workload{
		mk("add", "Set.Add of a new member, 1 live member held", other, func(ctx context.Context, s *expset.Set, o, m string) error {
			_, err := s.Add(ctx, o, m, ttl)
			return err
		}),
		mk("remove", "Set.Remove of a held member", same, func(ctx context.Context, s *expset.Set, o, m string) error {
			n, err := s.Remove(ctx, o, m)
			if err == nil && n != 1 && o != "warm-up" {
				err = fmt.Errorf("removed %d, want 1", n)
			}
			return err
		}),
		mk("extend", "Set.Extend of a held member to now+2m", same, func(ctx context.Context, s *expset.Set, o, m string) error {
			_, err := s.Extend(ctx, o, m, 2*ttl)
			return err
		}),
	}
}

// acquireManyWorkload is Quota.AcquireMany of 100 requests per call, each
// owner holding 1 live member: instructions per request.
func acquireManyWorkload() workload {
	const size = 100
	return workload{name: "acquire-many/live", unit: "request", vs: "recipe/straightforward/live",
		what: "Quota.AcquireMany, 100 requests per call, 1 live member held", prep: func(ctx context.Context, e *env) (job, error) {
			s, err := expset.Open(ctx, e.rdb, setName)
			if err != nil {
				return job{}, err
			}
			q, err := expset.NewQuota(s, limit)
			if err != nil {
				return job{}, err
			}
			if err := seed(ctx, e.rdb, s, e.owners, seedNames[:1], time.Now().Add(ttl), true, false); err != nil {
				return job{}, err
			}
			if _, err := q.Acquire(ctx, "warm-up", "m", ttl); err != nil {
				return job{}, err
			}
			calls := (e.n + size - 1) / size
			return job{calls: calls, units: e.n, do: func(ctx context.Context, c int) error {
				reqs := make([]expset.AcquireRequest, 0, size)
				for i := c * size; i < min(e.n, (c+1)*size); i++ {
					reqs = append(reqs, expset.AcquireRequest{Owner: e.owners[i], Member: e.members[i], TTL: ttl})
				}
				ds, err := q.AcquireMany(ctx, reqs)
				if err != nil {
					return err
				}
				for _, d := range ds {
					if !allowedNew(d) {
						return fmt.Errorf("unexpected decision %+v", d)
					}
				}
				return nil
			}}, nil
		}}
}

// sweepWorkload is one Sweeper.SweepOnce over a set whose owners each hold
// per expired members (deadline 1s ago): instructions per member reclaimed,
// the sweeper registry's and the index's reads included.
func sweepWorkload(name, set string, per int, opts ...expset.OpenOption) workload {
	return workload{name: "sweep/" + name, unit: "member", what: fmt.Sprintf("Sweeper.SweepOnce, %s, %d expired per owner", set, per),
		prep: func(ctx context.Context, e *env) (job, error) {
			s, err := expset.Open(ctx, e.rdb, setName, opts...)
			if err != nil {
				return job{}, err
			}
			cfg, err := expset.ReadConfiguration(ctx, e.rdb, setName)
			if err != nil {
				return job{}, err
			}
			owners, err := seedExpired(ctx, e, s, per, cfg.Index)
			if err != nil {
				return job{}, err
			}
			want := len(owners) * per
			w, err := expset.NewSweeper(s)
			if err != nil {
				return job{}, err
			}
			return job{calls: 1, units: want, do: func(ctx context.Context, _ int) error {
				st, err := w.SweepOnce(ctx)
				if err != nil {
					return err
				}
				if st.Expired != want || st.Skipped != 0 {
					return fmt.Errorf("swept %d members (%d shards skipped), want %d", st.Expired, st.Skipped, want)
				}
				return nil
			}}, nil
		}}
}

// sweepWorkloads are the sweeper with events and with the index alone, at 1
// and 10 expired members per owner.
func sweepWorkloads() []workload {
	return []workload{
		sweepWorkload("events", "WithExpiryEvents", 1, expset.WithExpiryEvents()),
		sweepWorkload("index", "WithSweepIndex", 1, expset.WithSweepIndex()),
		sweepWorkload("events-10", "WithExpiryEvents", 10, expset.WithExpiryEvents()),
		sweepWorkload("index-10", "WithSweepIndex", 10, expset.WithSweepIndex()),
	}
}
