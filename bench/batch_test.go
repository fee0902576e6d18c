package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset"
)

// batchSize is how many admissions one AcquireMany carries.
const batchSize = 100

// BenchmarkBatch compares the same admissions (the uncontended workload:
// every owner holds one member, limit 3, all allowed) made one Acquire at a
// time and batchSize at a time with AcquireMany, with the same 64
// goroutines and client. One op is one admission in both.
func BenchmarkBatch(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		b.Run("one-at-a-time", func(b *testing.B) { runBatch(b, srv, 1) })
		b.Run("acquire-many", func(b *testing.B) { runBatch(b, srv, batchSize) })
	})
}

func runBatch(b *testing.B, srv server, size int) {
	ctx := context.Background()
	const ttl = time.Minute
	a, err := openLibrary(ctx, srv.rdb, uniqueTag("batch"), 3)
	fatalIf(b, err, "open")
	l := a.(*library)
	defer func() { fatalIf(b, l.cleanup(ctx), "cleanup") }()
	owners := names("owner", b.N)
	members := names("m", b.N)
	fatalIf(b, l.seed(ctx, owners, "seed", ttl), "seed")
	var next, denied atomic.Int64
	var firstErr atomic.Pointer[error]

	start := startParallel(ctx, b, srv)
	b.RunParallel(func(pb *testing.PB) {
		reqs := make([]expset.AcquireRequest, 0, size)
		send := func() {
			ds, err := l.q.AcquireMany(ctx, reqs)
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
			for _, d := range ds {
				if !d.Allowed {
					denied.Add(1)
				}
			}
			reqs = reqs[:0]
		}
		for pb.Next() {
			i := next.Add(1) - 1
			reqs = append(reqs, expset.AcquireRequest{Owner: owners[i], Member: members[i], TTL: ttl})
			if len(reqs) == size {
				send()
			}
		}
		if len(reqs) > 0 {
			send()
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if p := firstErr.Load(); p != nil {
		b.Fatal(*p)
	}
	if n := denied.Load(); n > 0 {
		b.Fatalf("%d admissions denied in a workload that allows all", n)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	if srv.real {
		usec, _ := serverMicros(ctx, b, srv, []string{"evalsha"})
		b.ReportMetric(usec/float64(b.N), "server-us/op")
	}
}
