package expset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// seedStaggered gives owners o0..o(owners-1) members m0..m(per-1) with
// deadlines 1s, 2s, ... apart (member j of owner i at (i+j)%spread+1 seconds),
// and returns every member keyed by owner with its deadline.
func seedStaggered(t *testing.T, s *Set, owners, per, spread int) map[string]map[string]time.Time {
	t.Helper()
	ctx := context.Background()
	out := map[string]map[string]time.Time{}
	for i := 0; i < owners; i++ {
		out["o"+strconv.Itoa(i)] = map[string]time.Time{}
	}
	var mu sync.Mutex
	concurrently(t, owners*per, func(k int) error {
		i, j := k/per, k%per
		o, m := "o"+strconv.Itoa(i), "m"+strconv.Itoa(j)
		ttl := time.Duration((i+j)%spread+1) * time.Second
		d, err := s.Add(ctx, o, m, ttl)
		mu.Lock()
		out[o][m] = d
		mu.Unlock()
		return err
	})
	return out
}

// eventsOf reads every entry of every shard's event stream.
func eventsOf(t *testing.T, s *Set) []Expiry {
	t.Helper()
	var out []Expiry
	for i, sk := range s.shards {
		msgs, err := s.rdb.XRange(context.Background(), sk.Events, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			e, err := parseExpiry(i, m, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
	}
	return out
}

// checkSwept checks that at now every member with a deadline <= now is gone,
// every later one is there with its deadline unchanged, and the index lists exactly the owners that
// still have members, each at its earliest deadline or below.
func checkSwept(t *testing.T, s *Set, seeded map[string]map[string]time.Time, now time.Time) (expired int) {
	t.Helper()
	ctx := context.Background()
	idx := indexOf(t, s)
	reads := map[string]*redis.ZSliceCmd{} // one pipeline for every owner
	pipe := s.rdb.Pipeline()
	for o := range seeded {
		reads[o] = pipe.ZRangeWithScores(ctx, s.OwnerKey(o), 0, -1)
	}
	_, _ = pipe.Exec(ctx) // each command's error is checked below
	for o, ms := range seeded {
		zs, err := reads[o].Result()
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]int64{} // member -> stored deadline
		for _, z := range zs {
			have[z.Member.(string)] = int64(z.Score)
		}
		for m, d := range ms {
			stored, ok := have[m]
			switch {
			case !d.After(now) && ok:
				t.Errorf("%s/%s expired at %v (now %v) but is still stored", o, m, d, now)
			case d.After(now) && !ok:
				t.Errorf("%s/%s live until %v (now %v) but is gone", o, m, d, now)
			case ok && stored != d.UnixMilli():
				t.Errorf("%s/%s stored with deadline %d, want %d", o, m, stored, d.UnixMilli())
			}
			if !d.After(now) {
				expired++
			}
		}
		score, indexed := idx[o]
		switch {
		case len(zs) > 0 && !indexed:
			t.Errorf("owner %s has %d members but no index entry", o, len(zs))
		case len(zs) == 0 && indexed:
			t.Errorf("owner %s has no members but an index entry", o)
		case len(zs) > 0 && score > int64(zs[0].Score):
			t.Errorf("owner %s indexed at %d, after its earliest deadline %v", o, score, zs[0].Score)
		}
		delete(idx, o)
	}
	if len(idx) > 0 {
		t.Errorf("index holds unknown owners %v", idx)
	}
	return expired
}

func TestSweepStaggered(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ev, payloads bool
	}{{false, false}, {true, false}, {true, true}} {
		ev := c.ev
		t.Run(fmt.Sprintf("events=%v/payloads=%v", c.ev, c.payloads), func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b backend) {
				opts := []OpenOption{WithSweepIndex()}
				if ev {
					opts = append(opts, WithExpiryEvents())
				}
				if c.payloads {
					opts = append(opts, WithPayloadStorage())
				}
				s, clk := newTestSet(t, b, append(opts, WithShards(4))...)
				seeded := seedStaggered(t, s, 60, 25, 10)
				// Small batches, so owners need several visits and shards
				// several batches.
				w := newSweeper(t, s, WithOwnersPerBatch(7), WithMembersPerBatch(11))
				ctx := context.Background()
				total := 0
				for step := 0; step < 11; step++ {
					st, err := w.SweepOnce(ctx)
					if err != nil {
						t.Fatal(err)
					}
					want := checkSwept(t, s, seeded, clk.Now())
					total += st.Expired
					if total != want {
						t.Fatalf("step %d: swept %d in all, want %d", step, total, want)
					}
					if st.Shards != 4 || st.Skipped != 0 {
						t.Fatalf("step %d: %+v", step, st)
					}
					if step > 0 && (st.Expired == 0 || st.MaxLateness != 0 || st.Batches == 0) {
						// Every step moves the clock exactly onto a deadline.
						t.Fatalf("step %d: %+v", step, st)
					}
					clk.Advance(time.Second)
				}
				if total != 60*25 {
					t.Fatalf("swept %d, want %d", total, 60*25)
				}
				if n := len(indexOf(t, s)); n != 0 {
					t.Fatalf("index holds %d owners after everything expired", n)
				}
				evs := eventsOf(t, s)
				if !ev {
					if len(evs) != 0 {
						t.Fatalf("%d events without WithExpiryEvents", len(evs))
					}
					return
				}
				seen := map[string]int{}
				for _, e := range evs {
					seen[e.Owner+"/"+e.Member]++
					if want := seeded[e.Owner][e.Member]; !e.Deadline.Equal(want) {
						t.Errorf("event %s/%s: deadline %v, want %v", e.Owner, e.Member, e.Deadline, want)
					}
				}
				if len(seen) != 60*25 || len(evs) != 60*25 {
					t.Fatalf("%d events for %d members, want one each of %d", len(evs), len(seen), 60*25)
				}
			})
		})
	}
}

func TestSweepLatenessAndStale(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		ctx := context.Background()
		for i, ttl := range []time.Duration{time.Second, 3 * time.Second} {
			for _, o := range []string{"a", "b", "c"} {
				must[time.Time](t)(s.Add(ctx, o, "m"+strconv.Itoa(i), ttl))
			}
		}
		// A stale early entry, and one of an owner that no longer exists.
		sk := s.shards[0]
		b.rdb.ZAdd(ctx, sk.Due, redisZ(float64(clk.Now().UnixMilli()-5000), "ghost"))
		must[time.Time](t)(s.Add(ctx, "d", "x", time.Hour))
		b.rdb.ZAdd(ctx, sk.Due, redisZ(float64(clk.Now().UnixMilli()), "d"))
		clk.Advance(4 * time.Second)
		st, err := newSweeper(t, s).SweepOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := SweepStats{Owners: 3, Expired: 6, Stale: 2, Batches: 1, Shards: 1,
			MaxLateness: 3 * time.Second, MeanLateness: 2 * time.Second, lateSum: 12000}
		if st != want {
			t.Fatalf("stats %+v, want %+v", st, want)
		}
		idx := indexOf(t, s)
		if len(idx) != 1 || idx["d"] != clk.Now().Add(time.Hour-4*time.Second).UnixMilli() {
			t.Fatalf("index %v: want only d, re-filed at its deadline", idx)
		}
	})
}

func TestSweeperInvalidOptions(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newTestSet(t, b, WithSweepIndex())
		for i, o := range []SweeperOption{WithLeaseTTL(time.Millisecond), WithPollInterval(0), WithOwnersPerBatch(0),
			WithOwnersPerBatch(1001), WithMembersPerBatch(-1), WithEventRetention(time.Hour, 10, defaultEventBytes)} {
			if w, err := NewSweeper(s, o); !errors.Is(err, ErrInvalidArgument) || w != nil {
				t.Errorf("NewSweeper(option %d): %v, %v, want ErrInvalidArgument", i, w, err)
			}
		}
		if w, err := NewSweeper(nil); !errors.Is(err, ErrInvalidArgument) || w != nil {
			t.Errorf("nil set: %v, %v", w, err)
		}
	})
}

// TestNoIndexWithoutEvents checks that a set opened without expiry events or
// WithSweepIndex keeps no due index (its writes touch only the owner's keys),
// that a Sweeper refuses it, and that its keys still go by their key TTL.
func TestNoIndexWithoutEvents(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(1))
		q := must[*Quota](t)(NewQuota(s, 2, WithEvictOldest(), WithRefreshOnReacquire()))
		must[time.Time](t)(s.Add(ctx, "u", "a", time.Minute))
		must[Decision](t)(q.Acquire(ctx, "v", "a", time.Minute))
		must[Decision](t)(q.Acquire(ctx, "v", "a", time.Second))
		must[Decision](t)(q.Acquire(ctx, "v", "b", time.Minute))
		must[Decision](t)(q.Acquire(ctx, "v", "c", time.Millisecond))
		must[int](t)(s.Remove(ctx, "u", "a"))
		if n := b.rdb.Exists(ctx, s.shards[0].Due).Val(); n != 0 {
			t.Fatalf("a set without events or WithSweepIndex wrote its due index")
		}
		checkKeyTTL(t, b, s.OwnerKey("v"), time.Minute)
		if w, err := NewSweeper(s); !errors.Is(err, ErrInvalidArgument) || w != nil {
			t.Fatalf("NewSweeper of a set without an index: %v, %v, want ErrInvalidArgument", w, err)
		}
		// WithSweepIndex is recorded like the other options.
		if _, err := Open(context.Background(), b.rdb, s.Name(), WithShards(1), WithSweepIndex()); !errors.Is(err, ErrConfigMismatch) {
			t.Fatalf("reopen WithSweepIndex: %v, want ErrConfigMismatch", err)
		}
		cfg := must[Configuration](t)(ReadConfiguration(ctx, b.rdb, s.Name()))
		if cfg.Index {
			t.Fatalf("configuration %+v records an index", cfg)
		}
	})
}

// runSweeper starts w.Run and returns a stop function that ends it and waits.
func runSweeper(t *testing.T, w *Sweeper) (stop func()) {
	t.Helper()
	return background(t, "Run", w.Run)
}

// background runs run in a goroutine until the returned stop is called (or t
// ends), then waits for it and checks that it returned nil.
func background(t *testing.T, what string, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", what, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond every 5ms until it holds, and fails t after 30s
// (a bound for a hang, not a timing: loaded machines take seconds).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestRunSweepsAndReleases(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(3), WithExpiryEvents())
		seeded := seedStaggered(t, s, 20, 3, 5)
		var mu sync.Mutex
		var got SweepStats
		s.hooks.OnSweep = func(_ context.Context, ci CallInfo, si SweepStats) {
			mu.Lock()
			got.add(si)
			mu.Unlock()
		}
		w := newSweeper(t, s, WithPollInterval(10*time.Millisecond))
		stop := runSweeper(t, w)
		clk.Advance(3 * time.Second)
		want := 0
		for _, ms := range seeded {
			for _, d := range ms {
				if !d.After(clk.Now()) {
					want++
				}
			}
		}
		waitFor(t, "the sweep", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return got.Expired == want
		})
		stop()
		checkSwept(t, s, seeded, clk.Now())
		if n := len(eventsOf(t, s)); n != want {
			t.Fatalf("%d events, want %d", n, want)
		}
		if n := b.rdb.Exists(context.Background(), sweepersKey(s.name)).Val(); n != 0 {
			t.Fatalf("lease %s still held after Run returned", sweepersKey(s.name))
		}
	})
}

// TestRunWakesForDeadline checks that with the server's clock an idle Run
// turns a deadline into an event, even when the deadline was added after Run
// last looked: it looks again at least every max idle interval (1s; the
// lateness is logged, not asserted: a loaded machine delays anything).
func TestRunWakesForDeadline(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		stop := runSweeper(t, newSweeper(t, s))
		time.Sleep(50 * time.Millisecond) // Run has looked at the empty shards
		ctx := context.Background()
		d := must[time.Time](t)(s.Add(ctx, "o", "m", 200*time.Millisecond))
		var seen time.Time
		waitFor(t, "the event", func() bool {
			if len(eventsOf(t, s)) == 1 {
				seen = time.Now()
				return true
			}
			return false
		})
		stop()
		t.Logf("event seen %v after its deadline", seen.Sub(d))
	})
}

// TestTwoSweepersRace runs two sweepers over the same shards while members
// keep expiring, plus two lease-less sweep loops (sweepers whose leases
// lapsed mid-sweep, the worst case): every expired member yields exactly one
// event.
func TestTwoSweepersRace(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents())
		seeded := seedStaggered(t, s, 40, 10, 8)
		opts := []SweeperOption{WithPollInterval(2 * time.Millisecond), WithLeaseTTL(30 * time.Millisecond), WithOwnersPerBatch(3), WithMembersPerBatch(5)}
		stop1 := runSweeper(t, newSweeper(t, s, opts...))
		stop2 := runSweeper(t, newSweeper(t, s, opts...))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			w := newSweeper(t, s, WithOwnersPerBatch(2), WithMembersPerBatch(3))
			wg.Add(1)
			go func() {
				defer wg.Done()
				noLease := func(context.Context) error { return nil }
				for ctx.Err() == nil {
					for i := range s.shards {
						if _, _, err := w.sweepShard(ctx, i, noLease); err != nil && ctx.Err() == nil {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
		for i := 0; i < 9; i++ {
			clk.Advance(time.Second)
			time.Sleep(10 * time.Millisecond)
		}
		waitFor(t, "every event", func() bool { return len(eventsOf(t, s)) >= 400 })
		cancel()
		wg.Wait()
		stop1()
		stop2()
		checkSwept(t, s, seeded, clk.Now())
		seen := map[string]int{}
		for _, e := range eventsOf(t, s) {
			seen[e.Owner+"/"+e.Member]++
		}
		var dup []string
		for k, n := range seen {
			if n != 1 {
				dup = append(dup, k)
			}
		}
		sort.Strings(dup)
		if len(seen) != 400 || len(dup) > 0 {
			t.Fatalf("%d members with events (want 400), duplicated: %v", len(seen), dup)
		}
	})
}

// TestLeaseStolen replaces a running sweeper's lease by a thief's that
// lasts: it reports its lease lost, takes it anew, stops sweeping the
// shard the thief's lease now holds, keeps sweeping the other, and takes
// the shard back once the thief's lease is gone.
func TestLeaseStolen(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents())
		ctx := context.Background()
		owner := oneOwnerPerShard(s)
		var mu sync.Mutex
		var lost []error
		s.hooks.OnError = func(_ context.Context, ci CallInfo, retry time.Duration) {
			ei := errorReport{ci, retry}
			mu.Lock()
			lost = append(lost, ei.Err)
			mu.Unlock()
		}
		// A lease long enough for its renewals (every third of it) to keep
		// it on a loaded machine.
		w := newSweeper(t, s, WithPollInterval(5*time.Millisecond), WithLeaseTTL(600*time.Millisecond))
		stop := runSweeper(t, w)
		key := sweepersKey(s.name)
		var mine string
		waitFor(t, "the lease", func() bool {
			tokens := sweeperTokens(t, s)
			if len(tokens) == 1 {
				mine = tokens[0]
			}
			return mine != ""
		})
		// Steal the lease: the thief's lasts an hour. Wait for the sweeper to
		// report it lost. (Should the lease lapse before, only a report that
		// came after the theft counts.)
		mu.Lock()
		before := len(lost)
		mu.Unlock()
		if _, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, key, mine)
			p.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "thief"})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the lost lease", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, err := range lost[before:] {
				if strings.Contains(err.Error(), key) {
					return true
				}
			}
			return false
		})
		mu.Lock()
		for _, err := range lost {
			if !errors.Is(err, ErrLeaseLost) {
				t.Errorf("reported %v, want ErrLeaseLost", err)
			}
		}
		mu.Unlock()
		tokens := sweeperTokens(t, s)
		if !slices.Equal(tokens, slices.Sorted(slices.Values([]string{mine, "thief"}))) {
			t.Fatalf("leases %q, want %q and the thief's", tokens, mine)
		}
		theirs := slices.Index(tokens, "thief") // the thief's shard: round-robin over the sorted tokens
		ours := 1 - theirs
		for _, o := range owner {
			must[time.Time](t)(s.Add(ctx, o, "m", time.Second))
		}
		clk.Advance(time.Second)
		waitFor(t, "our shard's sweep", func() bool { return b.rdb.XLen(ctx, s.shards[ours].Events).Val() == 1 })
		time.Sleep(50 * time.Millisecond)
		if n := b.rdb.XLen(ctx, s.shards[theirs].Events).Val(); n != 0 {
			t.Fatalf("shard %d swept under the thief's lease: %d events", theirs, n)
		}
		b.rdb.ZRem(ctx, key, "thief")
		waitFor(t, "the thief's shard taken back", func() bool { return b.rdb.XLen(ctx, s.shards[theirs].Events).Val() == 1 })
		stop()
	})
}

// TestSweepOnceSkipsLeasedShard: while a Run's lease lives, SweepOnce leaves
// the shards to it, and sweeps them once the lease has ended (a sweeper
// killed mid-way).
func TestSweepOnceSkipsLeasedShard(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		ctx := context.Background()
		must[time.Time](t)(s.Add(ctx, "o", "m", time.Second))
		clk.Advance(time.Second)
		// A "dead" sweeper's lease, 3s left on the server's clock (long
		// enough for the first checks on a loaded machine).
		now := must[time.Time](t)(b.rdb.Time(ctx).Result())
		b.rdb.ZAdd(ctx, sweepersKey(s.name), redis.Z{Score: float64(now.Add(3 * time.Second).UnixMilli()), Member: "dead"})
		w := newSweeper(t, s)
		st, err := w.SweepOnce(ctx)
		if err != nil || st.Skipped != 1 || st.Expired != 0 {
			t.Fatalf("%+v %v: want the shard skipped", st, err)
		}
		if ss := must[[]ShardStats](t)(s.Stats(ctx)); !ss[0].Leased {
			t.Fatalf("Stats %+v: want the shard leased", ss[0])
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err = w.SweepOnce(ctx)
			if err != nil || st.Skipped == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil || st.Shards != 1 || st.Expired != 1 {
			t.Fatalf("%+v %v: want the shard swept once the lease lapsed", st, err)
		}
		if ss := must[[]ShardStats](t)(s.Stats(ctx)); ss[0].Leased {
			t.Fatalf("Stats %+v: want the shard not leased", ss[0])
		}
	})
}

// sweeperTokens returns the tokens of the set's live sweeper leases, sorted.
func sweeperTokens(t testing.TB, s *Set) []string {
	t.Helper()
	return must[store.Registry](t)(s.sweepers(context.Background(), "", -1)).Tokens
}

func TestSweepStatsAdd(t *testing.T) {
	t.Parallel()
	var total SweepStats
	total.add(SweepStats{Owners: 1, Expired: 1, Batches: 1, Shards: 1, MaxLateness: time.Second, MeanLateness: time.Second, lateSum: 1000})
	total.add(SweepStats{Owners: 2, Expired: 3, Stale: 1, Batches: 1, Shards: 1, Skipped: 1, MaxLateness: 3 * time.Second, MeanLateness: 3 * time.Second, lateSum: 9000})
	want := SweepStats{Owners: 3, Expired: 4, Stale: 1, Batches: 2, Shards: 2, Skipped: 1, MaxLateness: 3 * time.Second, MeanLateness: 2500 * time.Millisecond, lateSum: 10000}
	if total != want {
		t.Fatalf("got %+v, want %+v", total, want)
	}
}
