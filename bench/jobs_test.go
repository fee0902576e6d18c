package bench

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// The bare recipe of a job queue, as one would write it with go-redis and
// no library: a put (job-put.lua: TIME, ZADD NX, HSET) and a drain
// (job-take.lua: due IDs, their payloads, removed, 100 a call). At most
// once, no due index, no wake-up, no consumer groups, no retries.
var (
	//go:embed testdata/recipes/job-put.lua
	jobPutRecipe string
	//go:embed testdata/recipes/job-take.lua
	jobTakeRecipe string

	jobPutScript  = redis.NewScript(jobPutRecipe)
	jobTakeScript = redis.NewScript(jobTakeRecipe)
)

// benchJobPayload is every job's payload: 64 bytes.
var benchJobPayload = []byte(strings.Repeat("0123456789abcdef", 4))

// BenchmarkJobs puts b.N jobs due at once (64-byte payloads, from
// goroutines goroutines) and drains them, time-based (run with -benchtime
// 20000x), two ways in one run:
//
//   - bare-recipe: the go-redis recipe above, put then taken 100 a call;
//   - expset: Set.Put (a job due at once: the put writes its event), then
//     one Set.Consume WithConcurrency(16) with a no-op handler until every
//     job is handled (at least once, fan-out to groups, exact attempts,
//     retried writes recognised).
//
// Metrics: jobs/s and the server's CPU time per job (INFO cpu, user +
// system, over the case: server-us/job); expset's are also divided by the
// bare recipe's of the same run (x-bare: its rate as a share of the
// recipe's; server-x-bare: its server time as a multiple of the recipe's).
func BenchmarkJobs(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		var bareRate, bareCPU float64
		for _, c := range []struct {
			name string
			run  func(b *testing.B, rdb *redis.Client, n int) (cleanup func())
		}{{"bare-recipe", bareJobs}, {"expset", expsetJobs}} {
			b.Run(c.name, func(b *testing.B) {
				ctx := context.Background()
				cpu0 := serverCPU(ctx, b, srv)
				b.ResetTimer()
				start := time.Now()
				cleanup := c.run(b, srv.rdb, b.N)
				elapsed := time.Since(start)
				b.StopTimer()
				defer cleanup()
				rate := float64(b.N) / elapsed.Seconds()
				b.ReportMetric(rate, "jobs/s")
				if !srv.real {
					return
				}
				cpu := (serverCPU(ctx, b, srv) - cpu0) / float64(b.N)
				b.ReportMetric(cpu, "server-us/job")
				if c.name == "bare-recipe" {
					bareRate, bareCPU = rate, cpu
				} else if bareRate > 0 && bareCPU > 0 {
					b.ReportMetric(rate/bareRate, "x-bare")
					b.ReportMetric(cpu/bareCPU, "server-x-bare")
				}
			})
		}
	})
}

// bareJobs puts n jobs with the recipe from goroutines goroutines, then
// takes them 100 a call until all are taken. cleanup deletes its keys.
func bareJobs(b *testing.B, rdb *redis.Client, n int) (cleanup func()) {
	ctx := context.Background()
	tag := uniqueTag("bare-jobs")
	keys := []string{"bench:{" + tag + "}:jobs", "bench:{" + tag + "}:p"}
	cleanup = func() { _ = rdb.Del(ctx, keys...).Err() }
	parallel(b, n, func(i int) error {
		return jobPutScript.Run(ctx, rdb, keys, 0, "job-"+strconv.Itoa(i), benchJobPayload).Err()
	})
	for taken := 0; taken < n; {
		xs, err := jobTakeScript.Run(ctx, rdb, keys, 100).Slice()
		fatalIf(b, err, "take")
		if len(xs) == 0 {
			time.Sleep(time.Millisecond) // not yet due by the server's clock
			continue
		}
		taken += len(xs) / 2
	}
	return cleanup
}

// expsetJobs puts n jobs due at once with Set.Put from goroutines
// goroutines (each put writes its job's event) and consumes them with 16
// handler calls at once. cleanup drops the set.
func expsetJobs(b *testing.B, rdb *redis.Client, n int) (cleanup func()) {
	ctx := context.Background()
	name := "bench-jobs-" + uniqueTag()
	s, err := expset.Open(ctx, rdb, name, expset.WithExpiryEvents(), expset.WithPayloadStorage())
	fatalIf(b, err, "open")
	cleanup = func() { _, _ = expset.Drop(ctx, rdb, name) }
	parallel(b, n, func(i int) error {
		_, _, err := s.Put(ctx, "job-"+strconv.Itoa(i), 0, expset.WithPayload(benchJobPayload))
		return err
	})
	var handled atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = s.Consume(cctx, "bench", "c1", func(context.Context, expset.Expiry) error {
		if handled.Add(1) == int64(n) {
			cancel()
		}
		return nil
	}, expset.WithConcurrency(16))
	fatalIf(b, err, "consume")
	if got := handled.Load(); got != int64(n) {
		b.Fatalf("handled %d jobs, want %d", got, n)
	}
	return cleanup
}

// parallel runs call(0) ... call(n-1) from goroutines goroutines.
func parallel(b *testing.B, n int, call func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := call(i); err != nil {
					errs <- fmt.Errorf("call %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	fatalIf(b, <-errs, "put")
}

// serverCPU returns the server's CPU time so far, user and system, in
// microseconds (INFO cpu).
func serverCPU(ctx context.Context, b *testing.B, srv server) float64 {
	if !srv.real {
		return 0
	}
	info, err := srv.rdb.Info(ctx, "cpu").Result()
	fatalIf(b, err, "info cpu")
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			fatalIf(b, err, "info cpu "+k)
			total += f * 1e6
		}
	}
	return total
}
