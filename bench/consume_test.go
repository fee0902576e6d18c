package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/barestream"
	"github.com/redis/go-redis/v9"
)

// BenchmarkConsume measures expiry events handled per second by one
// consumer with a handler that does nothing, time-based: b.N events (run
// with -benchtime 20000x) are produced untimed by a SweepOnce over b.N
// owners with one expired member each, then consumed. Cases:
//
//   - consume: Set.Consume with its defaults (WithReadBatch 10);
//   - consume-batch100: Set.Consume WithReadBatch(100);
//   - consume-concurrency16: one Set.Consume WithConcurrency(16), its
//     no-op handler called up to 16 at once;
//   - bare-xreadgroup: the floor for the same delivery contract, written
//     directly: one pipelined XREADGROUP (COUNT 100) of every shard's
//     stream, then one pipeline of XACK and XDEL for every entry read.
//
// Metrics: events/s, and each case's rate divided by the bare loop's in
// the same run (the ratio to compare; absolute rates follow the machine's
// load); consume-concurrency16 also divided by the single-call Consume's
// (x-consume).
func BenchmarkConsume(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		var bare, single float64
		for _, c := range []struct {
			name string
			opts []expset.ConsumeOption
			bare bool
		}{
			{"bare-xreadgroup", nil, true},
			{"consume", nil, false},
			{"consume-batch100", []expset.ConsumeOption{expset.WithReadBatch(100)}, false},
			{"consume-concurrency16", []expset.ConsumeOption{expset.WithConcurrency(16)}, false},
		} {
			b.Run(c.name, func(b *testing.B) {
				rate := runConsume(b, srv, c.opts, c.bare)
				b.ReportMetric(rate, "events/s")
				if c.bare {
					bare = rate
				} else if bare > 0 {
					b.ReportMetric(rate/bare, "x-bare")
				}
				switch {
				case c.name == "consume":
					single = rate
				case len(c.opts) > 0 && single > 0 && c.name == "consume-concurrency16":
					b.ReportMetric(rate/single, "x-consume")
				}
			})
		}
	})
}

func runConsume(b *testing.B, srv server, opts []expset.ConsumeOption, bare bool) float64 {
	ctx := context.Background()
	name := "bench-consume-" + uniqueTag()
	s, err := expset.Open(ctx, srv.rdb, name, expset.WithExpiryEvents())
	fatalIf(b, err, "open")
	defer func() { _, _ = expset.Drop(ctx, srv.rdb, name) }()
	expireOwners(b, srv.rdb, s, b.N)
	const group = "bench"
	b.ResetTimer()
	start := time.Now()
	if bare {
		bareConsume(b, srv.rdb, s, group, b.N)
	} else {
		var handled atomic.Int64
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := s.Consume(cctx, group, "c1", func(context.Context, expset.Expiry) error {
			if handled.Add(1) == int64(b.N) {
				cancel()
			}
			return nil
		}, opts...)
		fatalIf(b, err, "consume")
		if n := handled.Load(); n != int64(b.N) {
			b.Fatalf("handled %d events, want %d", n, b.N)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	return float64(b.N) / elapsed.Seconds()
}

// bareConsume reads, acknowledges and deletes n events from every shard's
// stream with plain commands, pipelined per round (barestream.Consume).
func bareConsume(b *testing.B, rdb *redis.Client, s *expset.Set, group string, n int) {
	ctx := context.Background()
	streams, err := barestream.Streams(ctx, rdb, s.Name(), s.Shards(), group)
	fatalIf(b, err, "streams")
	fatalIf(b, barestream.Consume(ctx, rdb, streams, group, n), "bare consume")
}

// expireOwners gives s n expiry events, untimed: one expired member for
// each of n owners, swept by a SweepOnce.
func expireOwners(b *testing.B, rdb redis.UniversalClient, s *expset.Set, n int) {
	b.Helper()
	seedOwners(b, rdb, s, n, "due-", time.Now().Add(-time.Second), true)
	w, err := expset.NewSweeper(s)
	fatalIf(b, err, "sweeper")
	st, err := w.SweepOnce(context.Background())
	fatalIf(b, err, "sweep")
	if st.Expired != n {
		b.Fatalf("swept %d members, want %d", st.Expired, n)
	}
}
