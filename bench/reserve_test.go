package bench

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// BenchmarkReserveCommands measures what one Set.Reserve costs the server in
// a caller's own loop (Reserve, then Finish(nil), again and again), at
// default options and 16 shards: b.N events (run with -benchtime 200x) are
// produced untimed by a SweepOnce over b.N owners, then reserved and
// finished one by one by one consumer. Metrics per event: commands/reserve
// (INFO commandstats over the loop, every command counted, Finish's
// acknowledgement included), round-trips/reserve (a go-redis hook on the
// loop's client: a pipeline counts once, a connection's set-up commands
// each) and dials/reserve (new connections: a pub/sub subscription takes
// one).
func BenchmarkReserveCommands(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		ctx := context.Background()
		name := "bench-reserve-" + uniqueTag()
		var trips, dials atomic.Int64
		rdb := redis.NewClient(srv.rdb.Options())
		defer rdb.Close()
		rdb.AddHook(tripCounter{&trips, &dials})
		s, err := expset.Open(ctx, rdb, name, expset.WithExpiryEvents())
		fatalIf(b, err, "open")
		defer func() { _, _ = expset.Drop(ctx, srv.rdb, name) }()
		expireOwners(b, srv.rdb, s, b.N)
		resetStats(ctx, b, srv)
		trips.Store(0)
		dials.Store(0)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r, err := s.Reserve(ctx, "bench", "c1")
			fatalIf(b, err, "reserve")
			fatalIf(b, r.Finish(ctx, nil), "finish")
		}
		b.StopTimer()
		n := float64(b.N)
		b.ReportMetric(float64(trips.Load())/n, "round-trips/reserve")
		b.ReportMetric(float64(dials.Load())/n, "dials/reserve")
		if srv.real {
			calls, byCmd := commandCalls(ctx, b, srv.rdb)
			b.ReportMetric(float64(calls)/n, "commands/reserve")
			b.Logf("%d events reserved and finished: %s", b.N, byCmd)
		}
		b.ReportMetric(0, "ns/op")
	})
}

// tripCounter is a go-redis hook that counts round trips (a command, or a
// pipeline) and dials.
type tripCounter struct{ trips, dials *atomic.Int64 }

func (h tripCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (h tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		return next(ctx, cmds)
	}
}
