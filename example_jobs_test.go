package expset_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// A reminder service: reminders are jobs put by ID with a delay, never
// doubled by a retried request, moved or cancelled by ID, and delivered by
// the set's Sweeper and Consume once due, with an empty Owner.
func ExampleSet_Put() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, shutdown := context.WithCancel(context.Background())
	defer shutdown()

	reminders, err := expset.Open(ctx, rdb, "reminders", expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		panic(err)
	}
	remind := func(id string, in time.Duration, text string) {
		_, put, err := reminders.Put(ctx, id, in, expset.WithPayload([]byte(text)))
		if err != nil {
			panic(err)
		}
		if !put {
			fmt.Println(id, "is set already: kept as it was")
		}
	}
	remind("rem-1", 20*time.Millisecond, "call mum")
	remind("rem-1", time.Hour, "call mum") // a retried request
	remind("rem-2", time.Hour, "dentist")
	remind("rem-3", time.Hour, "stand-up")
	if _, err := reminders.Reschedule(ctx, "rem-2", 10*time.Millisecond); err != nil { // earlier
		panic(err)
	}
	cancelled, _ := reminders.Cancel(ctx, "rem-3")
	fmt.Println("rem-3 cancelled:", cancelled)
	for _, id := range []string{"rem-2", "rem-3"} {
		j, _ := reminders.Job(ctx, id)
		fmt.Printf("%s: %q\n", id, j.State)
	}

	sweeper, err := expset.NewSweeper(reminders)
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = sweeper.Run(ctx)
	}()
	var mu sync.Mutex
	var lines []string
	_ = reminders.Consume(ctx, "notify", "worker-1", func(_ context.Context, e expset.Expiry) error {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf("remind: %s (job %s, owner %q)", e.Payload, e.Member, e.Owner))
		if len(lines) == 2 {
			shutdown() // both due reminders sent: enough for the example
		}
		return nil
	})
	wg.Wait()
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// rem-1 is set already: kept as it was
	// rem-3 cancelled: true
	// rem-2: "waiting"
	// rem-3: ""
	// remind: call mum (job rem-1, owner "")
	// remind: dentist (job rem-2, owner "")
}
