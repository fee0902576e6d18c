package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// BenchmarkConsume measures expiry events handled per second by one
// consumer with a handler that does nothing, time-based: b.N events (run
// with -benchtime 20000x) are produced untimed by a SweepOnce over b.N
// owners with one expired member each, then consumed. Cases:
//
//   - consume: Set.Consume with its defaults (WithReadBatch 10);
//   - consume-batch100: Set.Consume WithReadBatch(100);
//   - bare-xreadgroup: the floor for the same delivery contract, written
//     directly: one pipelined XREADGROUP (COUNT 100) of every shard's
//     stream, then one pipeline of XACK and XDEL for every entry read.
//
// Metrics: events/s, and each case's rate divided by the bare loop's in
// the same run (the ratio to compare; absolute rates follow the machine's
// load).
func BenchmarkConsume(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		var bare float64
		for _, c := range []struct {
			name string
			opts []expset.Option
			bare bool
		}{
			{"bare-xreadgroup", nil, true},
			{"consume", nil, false},
			{"consume-batch100", []expset.Option{expset.WithReadBatch(100)}, false},
		} {
			b.Run(c.name, func(b *testing.B) {
				rate := runConsume(b, srv, c.opts, c.bare)
				b.ReportMetric(rate, "events/s")
				if c.bare {
					bare = rate
				} else if bare > 0 {
					b.ReportMetric(rate/bare, "x-bare")
				}
			})
		}
	})
}

func runConsume(b *testing.B, srv server, opts []expset.Option, bare bool) float64 {
	ctx := context.Background()
	name := "bench-consume-" + uniqueTag()
	s, err := expset.Open(ctx, srv.rdb, name, expset.WithExpiryEvents())
	fatalIf(b, err, "open")
	defer func() { _, _ = expset.Drop(ctx, srv.rdb, name) }()
	seedOwners(b, srv.rdb, s, b.N, "due-", time.Now().Add(-time.Second), true)
	w, err := expset.NewSweeper(s)
	fatalIf(b, err, "sweeper")
	st, err := w.SweepOnce(ctx)
	fatalIf(b, err, "sweep")
	if st.Expired != b.N {
		b.Fatalf("swept %d members, want %d", st.Expired, b.N)
	}
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
// stream with plain commands, pipelined per round.
func bareConsume(b *testing.B, rdb *redis.Client, s *expset.Set, group string, n int) {
	ctx := context.Background()
	streams := make([]string, s.Shards())
	for i := range streams {
		streams[i] = "expset:{" + s.Name() + ":" + strconv.Itoa(i) + "}:ev"
		err := rdb.XGroupCreateMkStream(ctx, streams[i], group, "0").Err()
		fatalIf(b, err, "xgroup create")
	}
	done := 0
	for done < n {
		pipe := rdb.Pipeline()
		reads := make([]*redis.XStreamSliceCmd, len(streams))
		for i, st := range streams {
			reads[i] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c1", Streams: []string{st, ">"}, Count: 100, Block: -1})
		}
		_, _ = pipe.Exec(ctx)
		ack := rdb.Pipeline()
		for i, r := range reads {
			res, err := r.Result()
			if err == redis.Nil {
				continue
			}
			fatalIf(b, err, "xreadgroup")
			for _, x := range res {
				ids := make([]string, len(x.Messages))
				for j, m := range x.Messages {
					ids[j] = m.ID
				}
				if len(ids) > 0 {
					ack.XAck(ctx, streams[i], group, ids...)
					ack.XDel(ctx, streams[i], ids...)
					done += len(ids)
				}
			}
		}
		if ack.Len() == 0 {
			b.Fatalf("streams empty after %d of %d events", done, n)
		}
		_, err := ack.Exec(ctx)
		fatalIf(b, err, "xack")
	}
}
