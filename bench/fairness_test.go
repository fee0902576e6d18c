package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// BenchmarkOwnerFairness measures how long a quiet owner's one event waits
// while a busy owner has 10,000 events queued before it on the same shard
// (one shard: an owner's events all lie on one), time-based: one Consume
// WithConcurrency(4), whose handler takes 2 ms for each busy event, from
// its start until the quiet event's handler call. Cases:
//
//   - uncapped: no WithOwnerConcurrency: the quiet event waits for the
//     busy events read before it (about 10,000 x 2 ms / 4);
//   - cap2: WithOwnerConcurrency(2): the busy owner's events past its two
//     running calls are set aside and the reader reads on.
//
// Metrics: quiet-ms, and cap2's divided by uncapped's in the same run
// (x-uncapped; the ratio to compare). Run with -benchtime 1x.
func BenchmarkOwnerFairness(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		var uncapped float64
		for _, c := range []struct {
			name string
			opts []expset.ConsumeOption
		}{
			{"uncapped", nil},
			{"cap2", []expset.ConsumeOption{expset.WithOwnerConcurrency(2)}},
		} {
			b.Run(c.name, func(b *testing.B) {
				var total time.Duration
				for i := 0; i < b.N; i++ {
					total += quietWait(b, srv.rdb, c.opts)
				}
				ms := float64(total.Microseconds()) / 1000 / float64(b.N)
				b.ReportMetric(ms, "quiet-ms")
				if c.opts == nil {
					uncapped = ms
				} else if uncapped > 0 {
					b.ReportMetric(ms/uncapped, "x-uncapped")
				}
			})
		}
	})
}

// quietWait runs one case of BenchmarkOwnerFairness: it returns how long
// the quiet owner's event waited from Consume's start.
func quietWait(b *testing.B, rdb *redis.Client, opts []expset.ConsumeOption) time.Duration {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	name := "bench-fair-" + uniqueTag()
	s, err := expset.Open(ctx, rdb, name, expset.WithExpiryEvents(), expset.WithShards(1))
	fatalIf(b, err, "open")
	defer func() { _, _ = expset.Drop(ctx, rdb, name) }()
	const busy = 10_000
	at := time.Now().Add(-time.Second)
	zs := make([]redis.Z, busy)
	for i := range zs {
		zs[i] = redis.Z{Score: float64(at.UnixMilli()), Member: "m" + strconv.Itoa(i)}
	}
	fatalIf(b, rdb.ZAdd(ctx, s.OwnerKey("busy"), zs...).Err(), "seed busy")
	fatalIf(b, rdb.ZAdd(ctx, dueKey(s, 0), redis.Z{Score: float64(at.UnixMilli()), Member: "busy"}).Err(), "seed due")
	w, err := expset.NewSweeper(s)
	fatalIf(b, err, "sweeper")
	for swept := 0; swept < busy; {
		st, err := w.SweepOnce(ctx)
		fatalIf(b, err, "sweep")
		swept += st.Expired
	}
	// The quiet owner's event comes after every busy one in the stream.
	_, err = s.Add(ctx, "quiet", "m", time.Millisecond)
	fatalIf(b, err, "add quiet")
	time.Sleep(5 * time.Millisecond)
	for st, err := w.SweepOnce(ctx); st.Expired != 1; st, err = w.SweepOnce(ctx) {
		fatalIf(b, err, "sweep quiet")
		time.Sleep(time.Millisecond)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var waited time.Duration
	start := time.Now()
	b.StartTimer()
	err = s.Consume(cctx, "bench", "c1", func(hctx context.Context, e expset.Expiry) error {
		if e.Owner == "quiet" {
			waited = time.Since(start)
			cancel()
			return nil
		}
		select {
		case <-time.After(2 * time.Millisecond):
		case <-hctx.Done():
		}
		return nil
	}, append([]expset.ConsumeOption{expset.WithConcurrency(4)}, opts...)...)
	b.StopTimer()
	fatalIf(b, err, "consume")
	return waited
}
