package bench

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// idleWindow is how long BenchmarkIdleCommands counts each case's commands.
var idleWindow = flag.Duration("idle-window", 20*time.Second, "how long BenchmarkIdleCommands counts the commands of each idle case")

// BenchmarkWakeLatency measures, at default options, the time from a
// member's deadline to its handler call, with one Sweeper.Run and one
// Consume running, each asleep until woken: b.N members (run with
// -benchtime 300x) are added to distinct owners, then handled. Cases:
//
//   - spread: all added at once, their deadlines 10ms apart (100ms to
//     100ms + b.N*10ms from now), so the sweeper sleeps until each;
//   - run-now: added one every 10ms with a 1ms ttl ("run now" jobs of a
//     delay queue), so each write wakes the sleeping sweeper.
//
// Metrics: p50-ms, p99-ms and max-ms of handler call time minus deadline
// (the deadline is the server's clock, the call this process's: one
// machine).
func BenchmarkWakeLatency(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		for _, c := range []struct {
			name string
			ttl  func(i int) time.Duration
			gap  time.Duration
		}{
			{"spread", func(i int) time.Duration { return 100*time.Millisecond + time.Duration(i)*10*time.Millisecond }, 0},
			{"run-now", func(int) time.Duration { return time.Millisecond }, 10 * time.Millisecond},
		} {
			b.Run(c.name, func(b *testing.B) { runWakeLatency(b, srv, c.ttl, c.gap) })
		}
	})
}

func runWakeLatency(b *testing.B, srv server, ttl func(int) time.Duration, gap time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := "bench-wake-" + uniqueTag()
	s, err := expset.Open(ctx, srv.rdb, name, expset.WithExpiryEvents())
	fatalIf(b, err, "open")
	defer func() { _, _ = expset.Drop(context.Background(), srv.rdb, name) }()
	w, err := expset.NewSweeper(s)
	fatalIf(b, err, "sweeper")
	var (
		mu   sync.Mutex
		late []time.Duration
		all  = make(chan struct{})
	)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	go func() {
		defer wg.Done()
		_ = s.Consume(ctx, "bench", "c1", func(_ context.Context, e expset.Expiry) error {
			d := time.Since(e.Deadline)
			mu.Lock()
			late = append(late, d)
			if len(late) == b.N {
				close(all)
			}
			mu.Unlock()
			return nil
		})
	}()
	time.Sleep(500 * time.Millisecond) // both loops subscribed and asleep
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, err := s.Add(ctx, "owner-"+strconv.Itoa(i), "m", ttl(i))
		fatalIf(b, err, "add")
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	select {
	case <-all:
	case <-time.After(time.Minute + time.Duration(b.N)*10*time.Millisecond):
		b.Fatalf("handled %d of %d within a minute of the last deadline", len(late), b.N)
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	ms := func(q float64) float64 {
		return float64(late[min(len(late)-1, int(q*float64(len(late))))].Microseconds()) / 1000
	}
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(float64(late[len(late)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkIdleCommands measures what idle loops cost the server, at
// default options, on a set WithExpiryEvents with nothing to do: commands
// per second (INFO commandstats, every command counted, those scripts run
// included) over -idle-window, after the loops' first pass. Cases, at 16 and
// 256 shards, per loop: one Sweeper.Run alone; four Consume calls of one
// group, one Consume WithConcurrency(50) (a worker pool of 50), a waiting
// Reserve, and one Consume WithOwnerConcurrency(1) WithConcurrency(2) whose
// one owner's call runs on while its 99 other events wait set aside
// (capped), each WithoutSweeper; then a whole process: one Consume
// WithConcurrency(50) with its in-process sweeper (process-consume50), and
// a waiting Reserve with its sweeper (process-reserve). Run once
// (-benchtime 1x); the window, not b.N, sets its length.
func BenchmarkIdleCommands(b *testing.B) {
	noSweep := expset.WithoutSweeper()
	underServer(b, func(b *testing.B, srv server) {
		for _, shards := range []int{16, 256} {
			for _, c := range []struct {
				name  string
				loops int
				opts  []expset.ConsumeOption
			}{{"sweeper", 1, nil}, {"consumer", 4, []expset.ConsumeOption{noSweep}},
				{"consumer-concurrency50", 1, []expset.ConsumeOption{noSweep, expset.WithConcurrency(50)}},
				{"reserve", 1, []expset.ConsumeOption{noSweep}},
				{"capped", 1, []expset.ConsumeOption{noSweep, expset.WithOwnerConcurrency(1), expset.WithConcurrency(2)}},
				{"process-consume50", 1, []expset.ConsumeOption{expset.WithConcurrency(50)}},
				{"process-reserve", 1, nil}} {
				b.Run(fmt.Sprintf("%s/shards-%d", c.name, shards), func(b *testing.B) {
					runIdle(b, srv, shards, c.name, c.loops, c.opts...)
				})
			}
		}
	})
}

// runIdle measures loops idle loops of kind: "sweeper" (Run), "reserve"
// or "process-reserve" (Reserve waiting) or else Consume.
func runIdle(b *testing.B, srv server, shards int, kind string, loops int, opts ...expset.ConsumeOption) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := "bench-idle-" + uniqueTag()
	s, err := expset.Open(ctx, srv.rdb, name, expset.WithExpiryEvents(), expset.WithShards(shards))
	fatalIf(b, err, "open")
	defer func() { _, _ = expset.Drop(context.Background(), srv.rdb, name) }()
	handle := func(context.Context, expset.Expiry) error { return nil }
	if kind == "capped" {
		// One owner's 100 events: one call runs until ctx ends, the rest wait.
		for i := 0; i < 100; i++ {
			_, err := s.Add(ctx, "busy", "m"+strconv.Itoa(i), time.Second)
			fatalIf(b, err, "add")
		}
		time.Sleep(1100 * time.Millisecond)
		w, err := expset.NewSweeper(s)
		fatalIf(b, err, "sweeper")
		st, err := w.SweepOnce(ctx)
		fatalIf(b, err, "sweep")
		if st.Expired != 100 {
			b.Fatalf("swept %d members, want 100", st.Expired)
		}
		handle = func(hctx context.Context, _ expset.Expiry) error {
			<-hctx.Done()
			return hctx.Err()
		}
		opts = append(opts, expset.WithMaxHandlingTime(time.Hour))
	}
	var wg sync.WaitGroup
	for i := 0; i < loops; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if kind == "reserve" || kind == "process-reserve" {
				var ropts []expset.ReserveOption
				for _, o := range opts {
					if ro, ok := o.(expset.ReserveOption); ok {
						ropts = append(ropts, ro)
					}
				}
				_, _ = s.Reserve(ctx, "bench", "c"+strconv.Itoa(i), ropts...)
				return
			}
			if kind == "sweeper" {
				w, err := expset.NewSweeper(s)
				if err == nil {
					_ = w.Run(ctx)
				}
				return
			}
			_ = s.Consume(ctx, "bench", "c"+strconv.Itoa(i), handle, opts...)
		}()
	}
	time.Sleep(2 * time.Second) // the first pass: groups, leases, first reads
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resetStats(ctx, b, srv)
		time.Sleep(*idleWindow)
		if !srv.real {
			continue // miniredis has no INFO commandstats
		}
		calls, byCmd := commandCalls(ctx, b, srv.rdb)
		b.ReportMetric(float64(calls)/idleWindow.Seconds()/float64(loops), "commands/s/loop")
		b.Logf("%d shards, %d %s: %.1f commands/s per loop over %v: %s", shards, loops, kind,
			float64(calls)/idleWindow.Seconds()/float64(loops), *idleWindow, byCmd)
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	cancel()
	wg.Wait()
}

// commandCalls returns the commands counted by INFO commandstats since the
// last reset (the INFO itself left out), in all and by command.
func commandCalls(ctx context.Context, b *testing.B, rdb *redis.Client) (int64, string) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	fatalIf(b, err, "info commandstats")
	var total int64
	var parts []string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") || name == "info" || name == "config|resetstat" {
			continue
		}
		n, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		if err != nil {
			continue
		}
		total += n
		parts = append(parts, name+"="+strconv.FormatInt(n, 10))
	}
	return total, strings.Join(parts, " ")
}
