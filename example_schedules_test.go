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

// Recurring schedules: a digest at 2:30 New York time and a six-hourly
// cleanup. Whatever sweeps the set writes each tick as one event, which
// every consumer group gets once; the example moves the set's clock by
// hand over two days that include the spring change in New York: 2:30
// does not exist on March 8, so no digest fires that day.
func ExampleSet_PutSchedule() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, shutdown := context.WithCancel(context.Background())
	defer shutdown()

	var mu sync.Mutex
	now := time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set, err := expset.Open(ctx, rdb, "reports", expset.WithExpiryEvents(), expset.WithClock(clock))
	if err != nil {
		panic(err)
	}
	digest, err := set.PutSchedule(ctx, "digest", "CRON_TZ=America/New_York 30 2 * * *", expset.WithPayload([]byte("to: team")))
	if err != nil {
		panic(err)
	}
	fmt.Println("first digest:", digest.UTC())
	if _, err := set.PutSchedule(ctx, "cleanup", "0 */6 * * *"); err != nil {
		panic(err)
	}

	sweeper, err := expset.NewSweeper(set)
	if err != nil {
		panic(err)
	}
	for range 2 * 24 * 4 { // two days, a quarter of an hour at a time
		mu.Lock()
		now = now.Add(15 * time.Minute)
		mu.Unlock()
		if _, err := sweeper.SweepOnce(ctx); err != nil {
			panic(err)
		}
	}

	var lines []string
	_ = set.Consume(ctx, "jobs", "worker-1", func(_ context.Context, e expset.Expiry) error {
		lines = append(lines, fmt.Sprintf("%s %s tick=%v %q", e.Deadline.UTC().Format(time.DateTime), e.Member, e.Tick, e.Payload))
		if len(lines) == 9 {
			shutdown()
		}
		return nil
	})
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	list, err := set.Schedules(context.Background())
	if err != nil {
		panic(err)
	}
	for _, s := range list {
		fmt.Printf("%s: next %s, last %s\n", s.ID, s.Next.UTC().Format(time.DateTime), s.Last.UTC().Format(time.DateTime))
	}
	// Output:
	// first digest: 2026-03-07 07:30:00 +0000 UTC
	// 2026-03-07 06:00:00 cleanup tick=true ""
	// 2026-03-07 07:30:00 digest tick=true "to: team"
	// 2026-03-07 12:00:00 cleanup tick=true ""
	// 2026-03-07 18:00:00 cleanup tick=true ""
	// 2026-03-08 00:00:00 cleanup tick=true ""
	// 2026-03-08 06:00:00 cleanup tick=true ""
	// 2026-03-08 12:00:00 cleanup tick=true ""
	// 2026-03-08 18:00:00 cleanup tick=true ""
	// 2026-03-09 00:00:00 cleanup tick=true ""
	// cleanup: next 2026-03-09 06:00:00, last 2026-03-09 00:00:00
	// digest: next 2026-03-09 06:30:00, last 2026-03-07 07:30:00
}
