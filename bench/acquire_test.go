package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A workload is who asks for a slot, how often and for how long.
type workload struct {
	name  string
	limit int
	ttl   time.Duration
	// seeded: every owner already holds one member when its timed request
	// comes. Otherwise owners are fresh (their key does not exist yet).
	seeded bool
	// hot > 0 makes the workload contended: operations go in rounds of
	// goroutines operations over hot owners each, so every hot owner gets
	// goroutines/hot concurrent requests per round. Otherwise every
	// operation has an owner of its own.
	hot int
}

var workloads = []workload{
	// The common case: a large owner space, each owner asked once while it
	// holds one earlier member; limit 3, so every request is allowed and
	// nothing has expired (the ttl outlives the run).
	{name: "uncontended", limit: 3, ttl: time.Minute, seeded: true},
	// An owner's first member: the key and the due-index entry are created.
	{name: "fresh-owner", limit: 3, ttl: time.Minute},
	// A few hot owners at limit 3 raced by all goroutines: 3 of every 8
	// requests per owner and round are admitted; the rest are denied.
	{name: "contended", limit: 3, ttl: time.Minute, hot: 8},
}

// BenchmarkAcquire runs every workload with every recipe, one after the
// other in the same process, with the same client (pool of 64 connections,
// 64 goroutines). Metrics: ops/s; p50-us and p99-us, the latency of one
// admission as the caller sees it; server-us/op, the server's own time per
// admission from INFO commandstats (summed over every command the recipe
// sends, reset before each case); admit-%; over-admits, the admissions past
// the limit (contended only: must be 0 for expset); retries/op for WATCH.
func BenchmarkAcquire(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		for _, w := range workloads {
			b.Run(w.name, func(b *testing.B) {
				for _, r := range recipes {
					b.Run(r.name, func(b *testing.B) { runAcquire(b, srv, r, w) })
				}
			})
		}
	})
}

func runAcquire(b *testing.B, srv server, r recipe, w workload) {
	ctx := context.Background()
	a, err := r.open(ctx, srv.rdb, uniqueTag(w.name, r.name), w.limit)
	fatalIf(b, err, "open")
	defer func() { fatalIf(b, a.cleanup(ctx), "cleanup") }()
	// Load scripts and warm the connections outside the timed part.
	_, _, err = a.acquire(ctx, "warm-up", "m", time.Second)
	fatalIf(b, err, "warm-up")

	members := names("m", b.N)
	var owners []string
	ownerOf := func(i int) int { return i }
	if w.hot > 0 {
		rounds := b.N/goroutines + 1
		owners = names("hot", rounds*w.hot)
		ownerOf = func(i int) int { return i/goroutines*w.hot + i%w.hot }
	} else {
		owners = names("owner", b.N)
	}
	if w.seeded {
		fatalIf(b, a.seed(ctx, owners, "seed", w.ttl), "seed")
	}
	admitted := make([]atomic.Int32, len(owners))
	lat := make(latencies, b.N)
	var next, retries, allowed atomic.Int64
	var firstErr atomic.Pointer[error]

	start := startParallel(ctx, b, srv)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1) - 1)
			o := ownerOf(i)
			t0 := time.Now()
			ok, n, err := a.acquire(ctx, owners[o], members[i], w.ttl)
			lat[i] = time.Since(t0)
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
				continue
			}
			retries.Add(int64(n))
			if ok {
				allowed.Add(1)
				admitted[o].Add(1)
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if p := firstErr.Load(); p != nil {
		b.Fatal(*p)
	}

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	lat.report(b)
	b.ReportMetric(100*float64(allowed.Load())/float64(b.N), "admit-%")
	if w.hot > 0 {
		over := 0
		for i := range admitted {
			over += max(0, int(admitted[i].Load())-w.limit)
		}
		b.ReportMetric(float64(over), "over-admits")
		if over > 0 && r.name == "expset" {
			b.Errorf("expset over-admitted %d times", over)
		}
	}
	if r.name == "watch-multi" {
		b.ReportMetric(float64(retries.Load())/float64(b.N), "retries/op")
	}
	if srv.real {
		usec, _ := serverMicros(ctx, b, srv, r.cmds)
		b.ReportMetric(usec/float64(b.N), "server-us/op")
	}
}
