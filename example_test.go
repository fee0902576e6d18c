package expset_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// The checkout case: at most 3 unpaid orders per user, each expiring 15
// minutes after it was placed. Time is the Redis server's; miniredis's
// SetTime stands in for the minutes passing.
func Example_checkout() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	mr.SetTime(now)

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	orders, err := expset.Open(context.Background(), rdb, "unpaid-orders")
	if err != nil {
		panic(err)
	}
	quota, err := expset.NewQuota(orders, 3)
	if err != nil {
		panic(err)
	}
	for _, id := range []string{"order-1", "order-2", "order-3", "order-4"} {
		d, err := quota.Acquire(ctx, "user-42", id, 15*time.Minute)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			fmt.Printf("%s placed, pay by %s (%d of %d)\n", id, d.Deadline.UTC().Format("15:04"), d.Count, d.Limit)
		} else {
			fmt.Printf("%s refused: %d unpaid, retry in %v\n", id, d.Count, d.RetryAfter)
		}
		now = now.Add(time.Minute)
		mr.SetTime(now)
	}

	// A retry of order-3 (its reply was lost, say) takes no second slot.
	d, _ := quota.Acquire(ctx, "user-42", "order-3", 15*time.Minute)
	fmt.Println("retry of order-3: allowed", d.Allowed, "existing", d.Existing)

	// order-2 is paid.
	paid, _ := quota.Release(ctx, "user-42", "order-2")
	fmt.Println("order-2 paid:", paid)

	// At 12:15 order-1 expires unpaid; it no longer counts.
	mr.SetTime(time.Date(2026, 11, 22, 12, 15, 0, 0, time.UTC))
	members, _ := orders.Members(ctx, "user-42", 0)
	for _, m := range members {
		fmt.Println("unpaid:", m.ID, "until", m.Deadline.UTC().Format("15:04"))
	}
	// Output:
	// order-1 placed, pay by 12:15 (1 of 3)
	// order-2 placed, pay by 12:16 (2 of 3)
	// order-3 placed, pay by 12:17 (3 of 3)
	// order-4 refused: 3 unpaid, retry in 12m0s
	// retry of order-3: allowed true existing true
	// order-2 paid: true
	// unpaid: order-3 until 12:17
}

// At most 2 sessions per account: a new login ends the oldest session
// instead of being refused.
func Example_sessions() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	sessions, _ := expset.Open(context.Background(), rdb, "sessions")
	quota, _ := expset.NewQuota(sessions, 2, expset.WithEvictOldest(), expset.WithRefreshOnReacquire())
	for _, s := range []string{"laptop", "phone", "tablet"} {
		d, err := quota.Acquire(ctx, "acct-7", s, 24*time.Hour)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s logged in: %d sessions, ended %v\n", s, d.Count, d.Evicted)
	}
	ok, _ := sessions.Contains(ctx, "acct-7", "laptop")
	fmt.Println("laptop still logged in:", ok)
	// Output:
	// laptop logged in: 1 sessions, ended []
	// phone logged in: 2 sessions, ended []
	// tablet logged in: 2 sessions, ended [laptop]
	// laptop still logged in: false
}

// A VIP owner gets a higher limit for one call.
func ExampleWithLimit() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	orders, _ := expset.Open(context.Background(), rdb, "orders")
	quota, _ := expset.NewQuota(orders, 1)
	quota.Acquire(ctx, "vip", "a", time.Hour)
	d, _ := quota.Acquire(ctx, "vip", "b", time.Hour)
	fmt.Println("default limit:", d.Allowed)
	d, _ = quota.Acquire(ctx, "vip", "b", time.Hour, expset.WithLimit(5))
	fmt.Println("VIP limit:", d.Allowed, d.Count, "of", d.Limit)
	// Output:
	// default limit: false
	// VIP limit: true 2 of 5
}
