package expset_test

// The code README.md shows, compiled here; TestReadmeSnippetsCompile checks
// that every Go snippet of the README stands in an example file. The
// runnable versions, with output, are the other examples.

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// placeOrder admits an unpaid order: at most 3 per user, each lapsing 15
// minutes after it was placed unless paid.
func placeOrder(ctx context.Context, rdb redis.UniversalClient, userID, orderID string) error {
	orders, err := expset.Open(ctx, rdb, "unpaid-orders") // open once, at start-up
	if err != nil {
		return err
	}
	quota, err := expset.NewQuota(orders, 3)
	if err != nil {
		return err
	}

	d, err := quota.Acquire(ctx, userID, orderID, 15*time.Minute)
	switch {
	case err != nil:
		return err // Redis failed, or bad input: errors.Is(err, expset.ErrInvalidArgument), ...
	case !d.Allowed:
		return fmt.Errorf("%d unpaid orders: pay one first, or retry in %v", d.Count, d.RetryAfter)
	}
	log.Printf("placed %s: pay by %v (a retry of a placed order is d.Existing)", orderID, d.Deadline)
	return nil
}

// payOrder frees the order's slot.
func payOrder(ctx context.Context, quota *expset.Quota, userID, orderID string) error {
	_, err := quota.Release(ctx, userID, orderID)
	return err
}

// runLapses runs, in every instance of the service, a consumer of the
// expiry events, which also sweeps (its shards shared through leases).
func runLapses(ctx context.Context, rdb redis.UniversalClient, hostname string) error {
	orders, err := expset.Open(ctx, rdb, "unpaid-orders", expset.WithExpiryEvents(), expset.WithPayloadStorage(),
		expset.WithConsumerGroups("stock", "email")) // each group gets every event
	if err != nil {
		return err
	}

	// Consume also sweeps: the instances share the shards through leases.
	// It returns nil when ctx ends and an error only for misuse. Redis
	// errors are retried with backoff and reported to Hooks.OnError (by
	// default, log/slog at warning level).
	return orders.Consume(ctx, "stock", hostname, func(ctx context.Context, e expset.Expiry) error {
		// At least once: key the work on Owner, Member and Deadline.
		return releaseStock(ctx, e.Owner, e.Member, e.Payload) // nil acknowledges; an error retries
	})
}

func releaseStock(context.Context, string, string, []byte) error { return nil }

// runJob waits, in arrival order, for one of the tenant's 2 slots.
func runJob(ctx context.Context, rdb redis.UniversalClient, tenant, jobID string) error {
	running, err := expset.Open(ctx, rdb, "running-jobs")
	if err != nil {
		return err
	}
	perTenant, err := expset.NewQuota(running, 2)
	if err != nil {
		return err
	}

	if _, err := perTenant.AcquireWait(ctx, tenant, jobID, 10*time.Minute); err != nil {
		return err // ctx ended (nothing is held) or Redis failed
	}
	defer perTenant.Release(context.WithoutCancel(ctx), tenant, jobID)
	return doJob(ctx, jobID)
}

func doJob(context.Context, string) error { return nil }

var _ = []any{placeOrder, payOrder, runLapses, runJob}
