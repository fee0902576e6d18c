package bench

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAcquireDurable measures what WithDurability costs: Acquire of a
// new member (1,000 owners, 8 goroutines per core) on a dedicated master
// with one replica in sync, without the option and with
// WithDurability(1, false, 1s), whose WAIT goes in one pipeline with the
// script. Metric: not-durable/op, the admissions whose WAIT fell short
// (0 while the replica keeps up).
//
//	go test -run '^$' -bench BenchmarkAcquireDurable -benchtime 3s ./bench/
func BenchmarkAcquireDurable(b *testing.B) {
	ctx := context.Background()
	master := redistest.Start(b)
	host, port, err := net.SplitHostPort(master.Addr)
	fatalIf(b, err, "address")
	redistest.Start(b, "--replicaof", host, port)
	rdb := master.Client(b, func(o *redis.Options) { o.PoolSize = 64 })
	for deadline := time.Now().Add(30 * time.Second); ; {
		info, err := redistest.Info(ctx, rdb, "replication")
		fatalIf(b, err, "INFO replication")
		if strings.Contains(info["slave0"], "state=online") {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the replica did not sync: %v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		name string
		opts []expset.OpenOption
	}{
		{"async", nil},
		{"wait-1-replica", []expset.OpenOption{expset.WithDurability(1, false, time.Second)}},
	} {
		var seq atomic.Int64 // across the runs of b.Run: every member new
		b.Run(c.name, func(b *testing.B) {
			s, err := expset.Open(ctx, rdb, "durable-"+c.name, c.opts...)
			fatalIf(b, err, "open")
			q, err := expset.NewQuota(s, 1<<30)
			fatalIf(b, err, "quota")
			var short atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := seq.Add(1)
					d, err := q.Acquire(ctx, fmt.Sprint("o", i%1000), fmt.Sprint("m", i), time.Minute)
					if err != nil || !d.Allowed {
						b.Errorf("Acquire: %+v, %v", d, err)
						return
					}
					if c.opts != nil && !d.Durable {
						short.Add(1)
					}
				}
			})
			b.ReportMetric(float64(short.Load())/float64(b.N), "not-durable/op")
		})
	}
}
