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
//   - alone: the quiet event with no busy one before it, capped: the floor;
//   - uncapped: no WithOwnerConcurrency: the quiet event waits for the
//     busy events read before it (about 10,000 x 2 ms / 4);
//   - cap2: WithOwnerConcurrency(2): the reader reads past the busy
//     owner's events once it holds its two slots, setting them aside.
//
// Metrics: quiet-ms, and cap2's divided by uncapped's and by alone's in the
// same run (x-uncapped, x-alone: the ratios to compare). Run with
// -benchtime 1x.
func BenchmarkOwnerFairness(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		ms := map[string]float64{}
		for _, c := range []struct {
			name string
			busy int
			opts []expset.ConsumeOption
		}{
			{"alone", 0, []expset.ConsumeOption{expset.WithOwnerConcurrency(2)}},
			{"uncapped", 10_000, nil},
			{"cap2", 10_000, []expset.ConsumeOption{expset.WithOwnerConcurrency(2)}},
		} {
			b.Run(c.name, func(b *testing.B) {
				var total time.Duration
				for i := 0; i < b.N; i++ {
					total += quietWait(b, srv.rdb, c.busy, c.opts)
				}
				ms[c.name] = float64(total.Microseconds()) / 1000 / float64(b.N)
				b.ReportMetric(ms[c.name], "quiet-ms")
				if c.name == "cap2" && ms["uncapped"] > 0 && ms["alone"] > 0 {
					b.ReportMetric(ms[c.name]/ms["uncapped"], "x-uncapped")
					b.ReportMetric(ms[c.name]/ms["alone"], "x-alone")
				}
			})
		}
	})
}

// quietWait runs one case of BenchmarkOwnerFairness: it returns how long
// the quiet owner's event waited from Consume's start.
func quietWait(b *testing.B, rdb *redis.Client, busy int, opts []expset.ConsumeOption) time.Duration {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	name := "bench-fair-" + uniqueTag()
	s, err := expset.Open(ctx, rdb, name, expset.WithExpiryEvents(), expset.WithShards(1))
	fatalIf(b, err, "open")
	defer func() { _, _ = expset.Drop(ctx, rdb, name) }()
	w, err := expset.NewSweeper(s)
	fatalIf(b, err, "sweeper")
	if busy > 0 {
		at := time.Now().Add(-time.Second)
		zs := make([]redis.Z, busy)
		for i := range zs {
			zs[i] = redis.Z{Score: float64(at.UnixMilli()), Member: "m" + strconv.Itoa(i)}
		}
		fatalIf(b, rdb.ZAdd(ctx, s.OwnerKey("busy"), zs...).Err(), "seed busy")
		fatalIf(b, rdb.ZAdd(ctx, dueKey(s, 0), redis.Z{Score: float64(at.UnixMilli()), Member: "busy"}).Err(), "seed due")
	}
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
