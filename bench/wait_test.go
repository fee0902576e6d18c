package bench

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// How the waiting benchmark's jobs use their slots: limit 2 per owner, each
// admitted job holds its slot waitHold and then releases it; its ttl (the
// lease a crashed worker would hold) is waitTTL.
const (
	waitLimit = 2
	waitHold  = 2 * time.Millisecond
	waitTTL   = 50 * time.Millisecond
)

// waitRecipes are the ways a job waits for a slot of a busy owner.
var waitRecipes = []struct {
	name string
	get  func(ctx context.Context, q *expset.Quota, member string) (bool, error)
}{
	// Quota.AcquireWait: the line, woken by Release.
	{"acquire-wait", func(ctx context.Context, q *expset.Quota, m string) (bool, error) {
		d, err := q.AcquireWait(ctx, "tenant", m, waitTTL)
		return d.Allowed, err
	}},
	// The loop a user writes without it: Acquire, sleep RetryAfter (the
	// earliest deadline: it cannot know of an early Release).
	{"loop-retry-after", func(ctx context.Context, q *expset.Quota, m string) (bool, error) {
		return pollLoop(ctx, q, m, 0)
	}},
	// The same loop with the sleep capped at 5ms, to catch early releases:
	// a poll.
	{"loop-poll-5ms", func(ctx context.Context, q *expset.Quota, m string) (bool, error) {
		return pollLoop(ctx, q, m, 5*time.Millisecond)
	}},
}

func pollLoop(ctx context.Context, q *expset.Quota, m string, most time.Duration) (bool, error) {
	for {
		d, err := q.Acquire(ctx, "tenant", m, waitTTL)
		if err != nil || d.Allowed {
			return d.Allowed, err
		}
		sleep := d.RetryAfter
		if most > 0 {
			sleep = min(sleep, most)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(sleep):
		}
	}
}

// BenchmarkWait: 10, 100 and 1,000 workers share one owner of limit 2; each
// takes a slot, holds it 2ms, releases it, and again. One op is one
// admission. Metrics: slots/s, admissions per second (at most 1000: 2
// slots of 2ms); used-%, the share of the slots' time held by jobs; and
// cmds/admission, the commands the client sent per admission (a go-redis
// hook; AcquireWait's subscription connection, one SSUBSCRIBE and a PING
// per 3s idle, not included), with server-us/admission from INFO
// commandstats (real Redis only).
func BenchmarkWait(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		for _, n := range []int{10, 100, 1000} {
			b.Run("waiters-"+strconv.Itoa(n), func(b *testing.B) {
				for _, r := range waitRecipes {
					b.Run(r.name, func(b *testing.B) { runWait(b, srv, n, r.get) })
				}
			})
		}
	})
}

// countHook counts the commands a client sends.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

func runWait(b *testing.B, srv server, workers int, get func(context.Context, *expset.Quota, string) (bool, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := *srv.rdb.Options()
	opts.PoolSize, opts.MinIdleConns = goroutines, 0
	rdb := redis.NewClient(&opts)
	defer rdb.Close()
	hook := &countHook{}
	rdb.AddHook(hook)
	a, err := openLibrary(ctx, rdb, uniqueTag("wait"), waitLimit)
	fatalIf(b, err, "open")
	l := a.(*library)
	defer func() { fatalIf(b, l.cleanup(context.Background()), "cleanup") }()

	var admitted atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := startParallel(ctx, b, srv)
	hook.n.Store(0)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				m := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				ok, err := get(ctx, l.q, m)
				if ctx.Err() != nil {
					return
				}
				if err != nil || !ok {
					if err == nil {
						err = errors.New("not allowed")
					}
					firstErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
				time.Sleep(waitHold)
				if _, err := l.q.Release(context.Background(), "tenant", m); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				if admitted.Add(1) >= int64(b.N) {
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if p := firstErr.Load(); p != nil {
		b.Fatal(*p)
	}
	n := admitted.Load()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "slots/s")
	b.ReportMetric(100*float64(n)*waitHold.Seconds()/(waitLimit*elapsed.Seconds()), "used-%")
	b.ReportMetric(float64(hook.n.Load())/float64(n), "cmds/admission")
	if srv.real {
		usec, _ := serverMicros(context.Background(), b, srv, []string{"evalsha", "eval"})
		b.ReportMetric(usec/float64(n), "server-us/admission")
	}
	b.ReportMetric(0, "ns/op")
}
