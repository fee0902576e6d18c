package expset

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkConsume: one Consume with a no-op handler on a real
// redis-server, over b.N events written straight into the streams of a set
// of 16 shards (default options); it reports events/s.
func BenchmarkConsume(b *testing.B) {
	rdb := redistest.Client(b)
	ctx := context.Background()
	s := must[*Set](b)(Open(context.Background(), rdb, uniqueName(b, rdb), WithExpiryEvents()))
	d := strconv.FormatInt(time.Now().UnixMilli(), 10)
	pipe := rdb.Pipeline()
	for i := 0; i < b.N; i++ {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.shards[i%len(s.shards)].Events, Values: []string{"o", "o" + strconv.Itoa(i), "m", "m", "d", d}})
		if pipe.Len() == 1000 {
			must[[]redis.Cmder](b)(pipe.Exec(ctx))
		}
	}
	if pipe.Len() > 0 {
		must[[]redis.Cmder](b)(pipe.Exec(ctx))
	}
	var handled atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	b.ResetTimer()
	start := time.Now()
	err := s.Consume(cctx, "g", "c", func(context.Context, Expiry) error {
		if handled.Add(1) == int64(b.N) {
			cancel()
		}
		return nil
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
