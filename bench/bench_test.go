// Package bench measures expset beside the alternatives and the floor on a
// real redis-server: go test -run '^$' -bench . ./bench/ (see README.md).
package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// goroutines is how many goroutines every parallel benchmark runs, and the
// client's pool size: one connection each.
const goroutines = 64

// server is the Redis the benchmarks run on.
type server struct {
	rdb *redis.Client
	// real is false on miniredis: a smoke run that only checks the code
	// runs. Its timings say nothing about Redis, so it reports no server
	// time, and its names start with "smoke-miniredis" so nothing compares
	// them with a real run.
	real bool
}

var (
	serverOnce sync.Once
	theServer  server
)

// realRedisAvailable reports whether a real Redis can be had: REDIS_ADDR, or
// redis-server on PATH for redistest to start.
func realRedisAvailable() bool {
	if os.Getenv("REDIS_ADDR") != "" {
		return true
	}
	_, err := redistest.Binary()
	return err == nil || redistest.Required()
}

// getServer returns the real Redis (redistest's, or REDIS_ADDR), or with
// -short or without redis-server an in-process miniredis.
func getServer(b *testing.B) server {
	b.Helper()
	serverOnce.Do(func() {
		opts := &redis.Options{PoolSize: goroutines, MinIdleConns: goroutines}
		if !testing.Short() && realRedisAvailable() {
			opts.Addr = redistest.Addr(b)
			theServer = server{rdb: redis.NewClient(opts), real: true}
			warmUp(b, theServer.rdb)
			return
		}
		mr, err := miniredis.Run()
		if err != nil {
			b.Fatal(err)
		}
		opts.Addr = mr.Addr()
		theServer = server{rdb: redis.NewClient(opts)}
	})
	if theServer.rdb == nil {
		b.Fatal("no Redis to benchmark")
	}
	return theServer
}

// warmUp grows a fresh server's memory and keyspace once, so the first case
// measured does not pay for page faults and rehashing the others do not.
func warmUp(b *testing.B, rdb *redis.Client) {
	ctx := context.Background()
	const keys = 200000
	for i := 0; i < keys; i += seedBatch {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < i+seedBatch; j++ {
				k := "bench:warm-up:" + strconv.Itoa(j)
				p.ZAdd(ctx, k, redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2, Member: "b"})
				p.PExpire(ctx, k, time.Minute)
			}
			return nil
		})
		fatalIf(b, err, "warm up")
	}
	fatalIf(b, unlinkMatching(ctx, rdb, "bench:warm-up:*"), "warm up")
}

// underServer runs fn as a sub-benchmark named for the server: directly on a
// real Redis, under "smoke-miniredis" on miniredis.
func underServer(b *testing.B, fn func(b *testing.B, srv server)) {
	srv := getServer(b)
	if srv.real {
		fn(b, srv)
		return
	}
	b.Run("smoke-miniredis", func(b *testing.B) {
		b.Log("miniredis smoke run: timings are not Redis's and are not compared (run without -short, with redis-server installed)")
		fn(b, srv)
	})
}

// startParallel readies b for the timed part of a parallel benchmark: INFO
// commandstats zeroed, goroutines goroutines in RunParallel, allocations
// reported, the timer reset. It returns when the timed part starts.
func startParallel(ctx context.Context, b *testing.B, srv server) time.Time {
	resetStats(ctx, b, srv)
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	return time.Now()
}

// resetStats zeroes INFO commandstats (real Redis only).
func resetStats(ctx context.Context, b *testing.B, srv server) {
	if !srv.real {
		return
	}
	if err := srv.rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
}

// serverMicros returns the server's total time in microseconds spent in
// cmds since the last resetStats, and how many calls it counted.
func serverMicros(ctx context.Context, b *testing.B, srv server, cmds []string) (usec float64, calls int64) {
	for _, c := range cmds {
		n, per, err := redistest.CommandStats(ctx, srv.rdb, c)
		if err != nil {
			b.Fatal(err)
		}
		usec += per * float64(n)
		calls += n
	}
	return usec, calls
}

// latencies holds one latency per operation, indexed by the operation's
// number, allocated before the timer starts.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	s := slices.Clone(l)
	slices.Sort(s)
	pct := func(p float64) float64 {
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
}

// names returns prefix0 ... prefix(n-1), built before the timer starts.
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

var caseSeq atomic.Int64

// uniqueTag names the keys of one benchmark run, so runs never share keys.
func uniqueTag(parts ...string) string {
	t := strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-" + strconv.FormatInt(caseSeq.Add(1), 10)
	for _, p := range parts {
		t += "-" + p
	}
	return t
}

func fatalIf(b *testing.B, err error, what string) {
	b.Helper()
	if err != nil {
		b.Fatal(fmt.Errorf("%s: %w", what, err))
	}
}
