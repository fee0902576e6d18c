package expset

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestEngineResumesAfterRestarts: a Consume and a Reserve loop go on
// working after each of several restarts of their server (SIGKILL, then a
// restart on the same port with AOF): after each, both handle a new event.
// How long each took from the server answering again to its first event is
// logged (the engine's backoff is capped at a second, and the lease
// keeper's acknowledgement retries too, so it is about a second).
func TestEngineResumesAfterRestarts(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	ctx := context.Background()
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	s := must[*Set](t)(Open(ctx, rdb, uniqueName(t, rdb), WithShards(2), WithExpiryEvents(), WithConsumerGroups("consume", "reserve"),
		WithHooks(Hooks{OnError: func(context.Context, CallInfo, time.Duration) {}})))
	opts := []ConsumeOption{WithLeaseTTL(time.Second), WithPollInterval(10 * time.Millisecond)}
	var mu sync.Mutex
	last := map[string]time.Time{} // front -> when it last handled an event
	seen := func(front string) {
		mu.Lock()
		last[front] = time.Now()
		mu.Unlock()
	}
	stops := []func(){
		background(t, "sweeper", newSweeper(t, s, WithPollInterval(10*time.Millisecond)).Run),
		background(t, "consume", func(ctx context.Context) error {
			return s.Consume(ctx, "consume", "c", func(context.Context, Expiry) error { seen("consume"); return nil }, opts...)
		}),
		background(t, "reserve", func(ctx context.Context) error {
			for ctx.Err() == nil {
				r, err := s.Reserve(ctx, "reserve", "r", reserveOpts(opts)...)
				if err != nil {
					continue
				}
				seen("reserve")
				for {
					err := r.Finish(ctx, nil)
					if err == nil || errors.Is(err, ErrLeaseLost) || ctx.Err() != nil {
						break
					}
					time.Sleep(10 * time.Millisecond) // the server is down: Finish again
				}
			}
			return nil
		}),
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for round := 0; round < 3; round++ {
		srv.Kill()
		time.Sleep(time.Second)
		if err := srv.Restart(); err != nil {
			t.Fatalf("restart %d: %v", round, err)
		}
		waitHealed(t, "the server answers", faultWait, func() error { return rdb.Ping(ctx).Err() })
		back := time.Now()
		waitHealed(t, "an event after the restart", faultWait, func() error {
			if _, err := s.Add(ctx, "o"+strconv.Itoa(round), "m"+strconv.Itoa(int(time.Now().UnixNano())), time.Millisecond); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for _, front := range []string{"consume", "reserve"} {
				if !last[front].After(back) {
					return errors.New(front + " handled nothing since the restart")
				}
			}
			return nil
		})
		mu.Lock()
		t.Logf("restart %d: Consume resumed %v and Reserve %v after the server answered", round+1,
			last["consume"].Sub(back).Round(time.Millisecond), last["reserve"].Sub(back).Round(time.Millisecond))
		mu.Unlock()
	}
}
