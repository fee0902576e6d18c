package expset_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// A reminder service: a handler whose provider is busy asks for its event
// again in 50ms (RetryAfter), and one that finds an empty reminder buries
// it at once (Bury): no retry can mend it, so it does not burn every
// attempt.
func ExampleRetryAfter() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// A fixed clock keeps the deadlines stable; services use Redis's clock.
	now := time.Date(2025, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	reminders, err := expset.Open(context.Background(), rdb, "reminders", expset.WithClock(clock),
		expset.WithShards(1), expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_, _ = reminders.Add(ctx, "alice", "r1", time.Minute, expset.WithPayload([]byte("call mom")))
	_, _ = reminders.Add(ctx, "bob", "r2", 2*time.Minute, expset.WithPayload(nil))
	now = now.Add(time.Hour)
	sweeper, err := expset.NewSweeper(reminders)
	if err != nil {
		panic(err)
	}
	if _, err := sweeper.SweepOnce(ctx); err != nil {
		panic(err)
	}

	errBusy := errors.New("phone busy")
	consumeCtx, stop := context.WithCancel(ctx)
	err = reminders.Consume(consumeCtx, "sms", "worker-1", func(_ context.Context, e expset.Expiry) error {
		switch {
		case len(e.Payload) == 0:
			fmt.Printf("%s attempt %d: empty, buried\n", e.Member, e.Attempt)
			return expset.Bury(errors.New("empty reminder"))
		case e.Attempt == 1:
			fmt.Printf("%s attempt %d: busy, again in 50ms\n", e.Member, e.Attempt)
			return expset.RetryAfter(errBusy, 50*time.Millisecond)
		}
		fmt.Printf("%s attempt %d: sent %q\n", e.Member, e.Attempt, e.Payload)
		stop()
		return nil
	})
	if err != nil {
		panic(err)
	}
	dead, err := reminders.DeadLetters(ctx, 0, 0)
	if err != nil {
		panic(err)
	}
	for _, d := range dead {
		fmt.Printf("dead letter: %s of %s after %d attempt(s): %s\n", d.Event.Member, d.Event.Owner, d.Event.Attempt, d.Error)
	}
	// Output:
	// r1 attempt 1: busy, again in 50ms
	// r2 attempt 1: empty, buried
	// r1 attempt 2: sent "call mom"
	// dead letter: r2 of bob after 1 attempt(s): empty reminder
}
