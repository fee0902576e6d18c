package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// limitsMeasured are the limits of the limit/ workloads: an admission's cost
// should follow the work, not the limit.
var limitsMeasured = []int{1, 100, 10000}

// A limitState is what each owner holds before a limit/ workload runs, at
// limit L: admit, about L/2 members (none at L 1), each owner taking as many
// admissions as it has free slots; retry, about L/2 members (1 at L 1), the
// call re-acquiring the latest of them; denied and evict, L members. Retry,
// denied and evict leave the state as it was, so their calls share few
// owners (at most 10,000 members seeded in all).
type limitState struct {
	name string
	what string
	held func(limit int) int
}

var limitStates = []limitState{
	{"admit", "allowed, the owner holds about limit/2 members", func(l int) int { return l / 2 }},
	{"retry", "the member is already held (Existing), among about limit/2", func(l int) int { return max(l/2, 1) }},
	{"denied", "denied at the limit, with RetryAfter", func(l int) int { return l }},
	{"evict", "WithEvictOldest at the limit: 1 evicted", func(l int) int { return l }},
}

// limitPlan is who holds what in one limit/ workload, and who each call
// goes to: owner o holds held members h<0..held-1>, deadlines 1 ms apart;
// call i goes to owner owner(i) with member member(i).
type limitPlan struct {
	owners []string
	held   int
	owner  func(i int) string
	member func(i int) string
}

func newLimitPlan(e *env, st limitState, l int) limitPlan {
	p := limitPlan{held: st.held(l)}
	var nOwners int
	if st.name == "admit" {
		free := l - p.held
		nOwners = (e.n + free - 1) / free
		p.member = func(i int) string { return e.members[i] }
	} else {
		nOwners = max(1, min(e.n, 10000/p.held))
		p.member = func(i int) string { return heldName(p.held - 1) }
		if st.name != "retry" {
			p.member = func(i int) string { return e.members[i] }
		}
	}
	p.owners = e.owners[:nOwners]
	p.owner = func(i int) string { return p.owners[i%nOwners] }
	return p
}

func heldName(i int) string { return fmt.Sprintf("h%05d", i) }

// seedLimit writes plan's members, live for ttl, with key TTLs as a set
// without events keeps them.
func seedLimit(ctx context.Context, rdb *redis.Client, s *expset.Set, p limitPlan) error {
	d := time.Now().Add(ttl).UnixMilli()
	pipe := rdb.Pipeline()
	for _, o := range p.owners {
		key := s.OwnerKey(o)
		zs := make([]redis.Z, 0, p.held)
		for i := 0; i < p.held; i++ {
			zs = append(zs, redis.Z{Score: float64(d + int64(i)), Member: heldName(i)})
		}
		for len(zs) > 0 {
			k := min(len(zs), 1000)
			pipe.ZAdd(ctx, key, zs[:k]...)
			zs = zs[k:]
		}
		if p.held > 0 {
			pipe.PExpireAt(ctx, key, time.UnixMilli(((d+int64(p.held))/ttlBucket+1)*ttlBucket))
		}
		if pipe.Len() >= 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

// limitWorkloads are Quota.Acquire at each of limitsMeasured in each
// limitState, and the straightforward script in the same state (evict
// beside its admit).
func limitWorkloads(e *env) ([]workload, error) {
	straight, err := e.script("recipes/straightforward.lua")
	if err != nil {
		return nil, err
	}
	var ws []workload
	for _, l := range limitsMeasured {
		for _, st := range limitStates {
			name := "limit-" + strconv.Itoa(l) + "/"
			vs := name + "straightforward/" + st.name
			if st.name == "evict" {
				vs = name + "straightforward/admit"
			}
			ws = append(ws, workload{name: name + "acquire/" + st.name, unit: "call", vs: vs,
				what: fmt.Sprintf("limit %d: %s", l, st.what), prep: limitAcquirePrep(st, l)})
			if st.name != "evict" {
				ws = append(ws, workload{name: name + "straightforward/" + st.name, unit: "call",
					what: fmt.Sprintf("limit %d: %s (recipe/straightforward)", l, st.what), prep: limitRecipePrep(straight, st, l)})
			}
		}
	}
	return ws, nil
}

func limitAcquirePrep(st limitState, l int) func(ctx context.Context, e *env) (job, error) {
	return func(ctx context.Context, e *env) (job, error) {
		s, err := expset.Open(ctx, e.rdb, setName)
		if err != nil {
			return job{}, err
		}
		var opts []expset.QuotaOption
		if st.name == "evict" {
			opts = append(opts, expset.WithEvictOldest())
		}
		q, err := expset.NewQuota(s, l, opts...)
		if err != nil {
			return job{}, err
		}
		p := newLimitPlan(e, st, l)
		if err := seedLimit(ctx, e.rdb, s, p); err != nil {
			return job{}, err
		}
		if _, err := q.Acquire(ctx, "warm-up", "m", ttl); err != nil {
			return job{}, err
		}
		return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error {
			d, err := q.Acquire(ctx, p.owner(i), p.member(i), ttl)
			if err != nil {
				return err
			}
			ok := false
			switch st.name {
			case "admit":
				ok = allowedNew(d)
			case "retry":
				ok = d.Allowed && d.Existing
			case "denied":
				ok = !d.Allowed && d.RetryAfter > 0
			case "evict":
				ok = d.Allowed && len(d.Evicted) == 1
			}
			if !ok {
				return fmt.Errorf("owner %s: unexpected decision %+v", p.owner(i), d)
			}
			return nil
		}}, nil
	}
}

func limitRecipePrep(straight *redis.Script, st limitState, l int) func(ctx context.Context, e *env) (job, error) {
	want := map[string]int64{"admit": 1, "retry": 2, "denied": 0}[st.name]
	return func(ctx context.Context, e *env) (job, error) {
		s, err := expset.Open(ctx, e.rdb, setName)
		if err != nil {
			return job{}, err
		}
		p := newLimitPlan(e, st, l)
		if err := seedLimit(ctx, e.rdb, s, p); err != nil {
			return job{}, err
		}
		ms := ttl.Milliseconds()
		if err := straight.Run(ctx, e.rdb, []string{s.OwnerKey("warm-up")}, l, ms, "m").Err(); err != nil {
			return job{}, err
		}
		return job{calls: e.n, units: e.n, do: func(ctx context.Context, i int) error {
			got, err := straight.Run(ctx, e.rdb, []string{s.OwnerKey(p.owner(i))}, l, ms, p.member(i)).Int64()
			if err == nil && got != want {
				err = fmt.Errorf("owner %s: reply %d, want %d", p.owner(i), got, want)
			}
			return err
		}}, nil
	}
}
