package expset

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestScriptsBoundedBytes checks, on every backend, that one write moves a
// bounded number of payload bytes whatever the data: an owner with more
// expired members carrying large payloads than one call may move gets some
// of them dropped by an Add (each with its event), the Add itself lands, no
// expired member is revived or loses its event, and the sweeper (several
// rounds of bounded calls) finishes the rest, each member with one event
// and its payload.
func TestScriptsBoundedBytes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage())
		const members, size = 12, 512 << 10 // 6 MiB: three calls' worth
		payload := func(i int) []byte {
			p := make([]byte, size)
			for j := range p {
				p[j] = byte(i)
			}
			return p
		}
		for i := range members {
			must[time.Time](t)(s.Add(ctx, "o", "m"+strconv.Itoa(i), time.Second, WithPayload(payload(i))))
		}
		clk.Advance(time.Minute)
		shard := s.ShardOf("o")
		must[time.Time](t)(s.Add(ctx, "o", "m0", time.Hour)) // m0 expired: it must get its event, not be revived
		evs, _ := must2[[]Expiry, string](t)(s.ReadEvents(ctx, shard, "0-0", 1000, 0))
		// One call moves about 1 MiB, plus at most one member, plus the
		// member it rewrites.
		if len(evs) == 0 || len(evs) > 1<<20/size+2 {
			t.Fatalf("one Add over %d expired members of %d KiB dropped %d", members, size>>10, len(evs))
		}
		if d := must[time.Time](t)(s.Deadline(ctx, "o", "m0")); !d.Equal(clk.Now().Add(time.Hour)) {
			t.Fatalf("m0's new deadline %v", d)
		}
		if n := must[int](t)(s.Count(ctx, "o")); n != 1 {
			t.Fatalf("live count %d after the Add, want 1", n)
		}
		w := newSweeper(t, s)
		st := must[SweepStats](t)(w.SweepOnce(ctx))
		if st.Batches < 2 {
			t.Fatalf("the sweeper moved %d members of %d KiB in %d batches", st.Expired, size>>10, st.Batches)
		}
		evs, _ = must2[[]Expiry, string](t)(s.ReadEvents(ctx, shard, "0-0", 1000, 0))
		seen := map[string]int{}
		for _, e := range evs {
			i, _ := strconv.Atoi(e.Member[1:])
			if seen[e.Member]++; seen[e.Member] > 1 || len(e.Payload) != size || e.Payload[0] != byte(i) || e.Evicted {
				t.Fatalf("event %s %s: %d bytes of payload, seen %d times", e.Member, reasonOf(e), len(e.Payload), seen[e.Member])
			}
		}
		if len(seen) != members {
			t.Fatalf("%d members got events, want %d", len(seen), members)
		}
		if n := b.rdb.HLen(ctx, s.shards[shard].Payload+"o").Val(); n != 0 {
			t.Fatalf("%d payloads left (m0 was rewritten without one)", n)
		}
	})
}

// TestScriptLatencyAtMaxima measures, on a redis-server of its own, how long
// each script holds the server when the data is at the documented maxima:
// owners with 150 expired (or live) members of maxPayloadLen-byte payloads,
// each call of Add, Acquire, Remove and the sweeper meeting more work than
// one call may do. It prints the longest SLOWLOG entry of each call and the
// worst latency a concurrent PING saw; bench/README.md quotes the figures.
// Wall-clock figures are printed, not asserted (the machine may be loaded):
// run it with -v to read them. Skipped with -short.
func TestScriptLatencyAtMaxima(t *testing.T) {
	redistest.SystemTest(t)
	if testing.Short() {
		t.Skip("a measurement on a dedicated redis-server; skipped with -short")
	}
	srv := redistest.Start(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000")
	rdb := srv.Client(t, func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
	ctx := context.Background()
	const per = 150
	big := make([]byte, maxPayloadLen)

	// seed gives owner per members with 1 MiB payloads and deadline
	// now+ttl, in one pipeline of plain writes (a seed, not a measurement).
	seed := func(t *testing.T, s *Set, clk *fakeClock, owner string, ttl time.Duration) {
		t.Helper()
		sk := s.shards[s.ShardOf(owner)]
		d := float64(clk.Now().Add(ttl).UnixMilli())
		for i := 0; i < per; i += 10 {
			pipe := rdb.Pipeline()
			for j := i; j < min(i+10, per); j++ {
				m := "m" + strconv.Itoa(j)
				pipe.ZAdd(ctx, sk.Owner+owner, redis.Z{Score: d + float64(j), Member: m})
				pipe.HSet(ctx, sk.Payload+owner, m, big)
			}
			if s.index {
				pipe.ZAdd(ctx, sk.Due, redis.Z{Score: d, Member: owner})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	type result struct {
		what                      string
		calls                     int
		median, slowest, pingWait time.Duration
	}
	var results []result
	measure := func(t *testing.T, what string, op func() error) {
		t.Helper()
		if err := rdb.SlowLogReset(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		pinger := srv.Client(t)
		done := make(chan struct{})
		var wg sync.WaitGroup
		var worst time.Duration
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				_ = pinger.Ping(ctx).Err()
				worst = max(worst, time.Since(start))
				time.Sleep(time.Millisecond)
			}
		}()
		err := op()
		close(done)
		wg.Wait()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		log, err := rdb.SlowLogGet(ctx, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		r := result{what: what, pingWait: worst}
		if testing.Verbose() { // name the slow commands (a loaded machine stretches any of them)
			for _, e := range log {
				if e.Duration > 40*time.Millisecond {
					t.Logf("  %s: %v %.100q", what, e.Duration, fmt.Sprint(e.Args[:min(len(e.Args), 4)]))
				}
			}
		}
		var ds []time.Duration
		for _, e := range log {
			if len(e.Args) > 0 && (e.Args[0] == "evalsha" || e.Args[0] == "eval") {
				ds = append(ds, e.Duration)
			}
		}
		slices.Sort(ds)
		if len(ds) > 0 {
			r.calls, r.median, r.slowest = len(ds), ds[len(ds)/2], ds[len(ds)-1]
		}
		results = append(results, r)
	}

	for _, events := range []bool{true, false} {
		opts := []OpenOption{WithPayloadStorage()}
		if events {
			opts = append(opts, WithExpiryEvents())
		}
		s, clk := newTestSet(t, backend{name: "redis", rdb: rdb}, opts...)
		q := must[*Quota](t)(NewQuota(s, 1, WithEvictOldest()))
		tag := fmt.Sprintf("events=%v", events)

		seed(t, s, clk, "add", time.Second)
		seed(t, s, clk, "acquire", time.Second)
		seed(t, s, clk, "remove", time.Second)
		seed(t, s, clk, "evict", time.Hour)
		clk.Advance(time.Minute)
		measure(t, tag+" Add over 150 expired", func() error {
			_, err := s.Add(ctx, "add", "new", time.Hour, WithPayload(big))
			return err
		})
		measure(t, tag+" Acquire over 150 expired", func() error {
			_, err := q.Acquire(ctx, "acquire", "new", time.Hour, WithPayload(big))
			return err
		})
		measure(t, tag+" Acquire evicting 149 live", func() error {
			_, err := q.Acquire(ctx, "evict", "new", time.Hour, WithPayload(big))
			return err
		})
		seed(t, s, clk, "remove", time.Hour)
		measure(t, tag+" Remove of 150 live", func() error {
			ids := make([]string, per)
			for i := range ids {
				ids[i] = "m" + strconv.Itoa(i)
			}
			_, err := s.Remove(ctx, "remove", ids...)
			return err
		})
		if events {
			seed(t, s, clk, "sweep1", -time.Second)
			seed(t, s, clk, "sweep2", -time.Second)
			measure(t, tag+" SweepOnce over 2x150 expired", func() error {
				_, err := newSweeper(t, s, WithMembersPerBatch(1000), WithOwnersPerBatch(1000)).SweepOnce(ctx)
				return err
			})
		}
		must[int](t)(Drop(ctx, rdb, s.Name()))
	}
	for _, r := range results {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		t.Logf("%-40s %4d scripts: median %6.2f ms, longest %7.2f ms; concurrent PING waited up to %7.2f ms",
			r.what, r.calls, ms(r.median), ms(r.slowest), ms(r.pingWait))
	}
}

// TestEvictionBoundedBytes checks an eviction larger than one call may
// move (a limit of 1 over six live members with 512 KiB payloads): each
// Acquire evicts what fits, reports it and denies with RetryAfter 0, until
// one admits; every member is evicted once, with one event carrying its
// payload.
func TestEvictionBoundedBytes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage())
		const members, size = 6, 512 << 10
		for i := range members {
			must[time.Time](t)(s.Add(ctx, "o", "m"+strconv.Itoa(i), time.Hour, WithPayload(make([]byte, size))))
			clk.Advance(time.Millisecond)
		}
		q := must[*Quota](t)(NewQuota(s, 1, WithEvictOldest()))
		var evicted []string
		calls := 0
		for {
			calls++
			d := must[Decision](t)(q.Acquire(ctx, "o", "new", time.Hour))
			evicted = append(evicted, d.Evicted...)
			if d.Allowed {
				if d.Count != 1 || d.Existing {
					t.Fatalf("the admitting call: %+v", d)
				}
				break
			}
			if d.RetryAfter != 0 || len(d.Evicted) == 0 || calls > members {
				t.Fatalf("call %d: %+v", calls, d)
			}
		}
		want := []string{"m0", "m1", "m2", "m3", "m4", "m5"}
		if calls < 2 || !reflect.DeepEqual(evicted, want) {
			t.Fatalf("%d calls evicted %v, want %v in several calls", calls, evicted, want)
		}
		evs, _ := must2[[]Expiry, string](t)(s.ReadEvents(ctx, s.ShardOf("o"), "0-0", 1000, 0))
		if len(evs) != members {
			t.Fatalf("%d events, want %d", len(evs), members)
		}
		for i, e := range evs {
			if e.Member != want[i] || !e.Evicted || len(e.Payload) != size {
				t.Fatalf("event %d: %s %s with %d bytes", i, e.Member, reasonOf(e), len(e.Payload))
			}
		}
	})
}
