package expset_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// An unpaid order expires after 15 minutes; the sweeper turns its expiry into
// an event, and a consumer cancels the order, with its payload at hand. In a
// service, Sweeper.Run and Set.Consume each run in their own goroutine until
// shutdown; here one sweep and one event show the flow.
func ExampleSweeper() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// A fixed clock keeps the output stable; services use Redis's clock.
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	orders, err := expset.Open(context.Background(), rdb, "orders", expset.WithClock(clock), expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_, _ = orders.Add(ctx, "alice", "order-1", 15*time.Minute, expset.WithPayload([]byte(`{"total":42}`)))
	_, _ = orders.Add(ctx, "alice", "order-2", time.Hour)

	now = now.Add(20 * time.Minute)
	sweeper, err := expset.NewSweeper(orders)
	if err != nil {
		panic(err)
	}
	stats, err := sweeper.SweepOnce(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("swept %d member(s) of %d owner(s), at most %v late\n", stats.Expired, stats.Owners, stats.MaxLateness)

	consumeCtx, stop := context.WithCancel(ctx)
	err = orders.Consume(consumeCtx, "billing", "worker-1", func(_ context.Context, e expset.Expiry) error {
		fmt.Printf("cancel %s of %s, due %s, attempt %d, payload %s\n",
			e.Member, e.Owner, e.Deadline.UTC().Format(time.Kitchen), e.Attempt, e.Payload)
		stop()     // one event is enough for the example
		return nil // acknowledged and deleted
	})
	if err != nil {
		panic(err)
	}
	n, _ := orders.Count(ctx, "alice")
	fmt.Println("alice still holds", n)
	// Output:
	// swept 1 member(s) of 1 owner(s), at most 5m0s late
	// cancel order-1 of alice, due 12:15PM, attempt 1, payload {"total":42}
	// alice still holds 1
}

// Sweeper.Run in a service: started once per instance in its own goroutine,
// stopped by cancelling its context at shutdown. Run returns nil then, and
// an error only for misuse, at once (here a set that keeps no due index).
// Every Redis error it survives (a restart, a failover, a broken shard) is
// retried with backoff and reported: to Hooks.OnError when set, as here,
// otherwise to log/slog at warning level.
func ExampleSweeper_Run() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	orders, err := expset.Open(context.Background(), rdb, "orders", expset.WithExpiryEvents(), expset.WithHooks(expset.Hooks{
		OnError: func(_ context.Context, e expset.CallInfo, retry time.Duration) {
			log.Printf("expset %s: %s shard %d: %v (retry in %v)", e.Set, e.Op, e.Shard, e.Err, retry)
		},
	}))
	if err != nil {
		panic(err)
	}
	ctx, shutdown := context.WithCancel(context.Background())
	swept := make(chan error, 1)
	sweeper, err := expset.NewSweeper(orders)
	if err != nil {
		panic(err)
	}
	go func() { swept <- sweeper.Run(ctx) }()

	_, _ = orders.Add(ctx, "alice", "order-1", 10*time.Millisecond)
	consumeCtx, stop := context.WithCancel(ctx)
	_ = orders.Consume(consumeCtx, "billing", "worker-1", func(_ context.Context, e expset.Expiry) error {
		fmt.Println("expired:", e.Owner, e.Member)
		stop()
		return nil
	})

	shutdown()
	fmt.Println("sweeper stopped:", <-swept)

	plain, _ := expset.Open(context.Background(), rdb, "sessions")
	_, err = expset.NewSweeper(plain)
	fmt.Println("a set with no due index has no sweeper:", errors.Is(err, expset.ErrInvalidArgument))
	// Output:
	// expired: alice order-1
	// sweeper stopped: <nil>
	// a set with no due index has no sweeper: true
}

// Set.Consume in a service: two consumer groups, declared when the set is
// opened, each receive every event (fan-out). Each Consume runs in its own
// goroutine until shutdown and returns nil then; it returns an error only for
// misuse (a set without events, a bad name or option), at once. Redis errors
// it survives are retried with backoff and reported to Hooks.OnError, or to
// log/slog at warning level. Handlers are idempotent, keyed on owner, member
// and deadline: an event can come twice.
func ExampleSet_Consume() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	orders, err := expset.Open(context.Background(), rdb, "orders", expset.WithExpiryEvents(), expset.WithPayloadStorage(),
		expset.WithConsumerGroups("billing", "email"))
	if err != nil {
		panic(err)
	}
	ctx, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lines []string
	run := func(name string, loop func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(ctx); err != nil {
				log.Printf("%s: %v", name, err) // misuse: a service would exit
			}
			mu.Lock()
			lines = append(lines, name+" stopped")
			mu.Unlock()
		}()
	}
	sweeper, err := expset.NewSweeper(orders)
	if err != nil {
		panic(err)
	}
	run("sweeper", sweeper.Run)
	for _, group := range []string{"billing", "email"} {
		run(group, func(ctx context.Context) error {
			return orders.Consume(ctx, group, "worker-1", func(ctx context.Context, e expset.Expiry) error {
				mu.Lock()
				defer mu.Unlock()
				lines = append(lines, fmt.Sprintf("%s: %s of %s expired (attempt %d, payload %s)", group, e.Member, e.Owner, e.Attempt, e.Payload))
				if len(lines) == 2 {
					shutdown() // both groups have it: enough for the example
				}
				return nil // acknowledged; an error would retry it
			}, expset.WithMaxAttempts(5))
		})
	}

	_, _ = orders.Add(ctx, "alice", "order-1", 10*time.Millisecond, expset.WithPayload([]byte(`{"total":42}`)))
	wg.Wait()
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// billing stopped
	// billing: order-1 of alice expired (attempt 1, payload {"total":42})
	// email stopped
	// email: order-1 of alice expired (attempt 1, payload {"total":42})
	// sweeper stopped
}
