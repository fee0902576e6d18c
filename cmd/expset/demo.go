package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/expset/expset"
	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

func (a *app) demoCmd() *cobra.Command {
	var ttl time.Duration
	var keep bool
	cmd := &cobra.Command{
		Use:     "demo [--redis URL] [--ttl 3s] [--keep]",
		Short:   "play the unpaid-orders checkout story (embedded Redis by default)",
		Example: "expset demo                       # embedded Redis, nothing to set up\nexpset demo --redis redis://localhost:6380 --ttl 5s",
		Args:    args(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl < 500*time.Millisecond || ttl > time.Minute {
				return fmt.Errorf("%w: --ttl %v: want 500ms to 1m", errUsage, ttl)
			}
			return a.demo(cmd.Context(), ttl, keep)
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 3*time.Second, "how long an unpaid order lives (15m in a real shop; short here so the story ends)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo's keys in Redis afterwards (they are deleted by default)")
	return cmd
}

// demo plays the unpaid-orders story: orders placed, the fourth refused
// with a retry-after, a retry that takes no second slot, one paid, one
// expired.
func (a *app) demo(ctx context.Context, ttl time.Duration, keep bool) error {
	stdout := a.stdout
	c, err := a.connect(ctx, true)
	if err != nil {
		return err
	}
	defer c.close()

	name := "demo-orders-" + uuid.NewString()[:8]
	orders, err := expset.Open(ctx, c.rdb, name)
	if err != nil {
		return err
	}
	if !keep {
		defer cleanup(c, orders)
	}
	quota, err := expset.NewQuota(orders, 3)
	if err != nil {
		return err
	}
	p := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	p("expset demo: at most 3 unpaid orders per user, each expires %v after it is placed", ttl)
	p("Redis: %s; set %q", c.desc, name)
	p("")

	const user = "user-42"
	place := func(order string) error {
		d, err := quota.Acquire(ctx, user, order, ttl)
		if err != nil {
			return err
		}
		switch {
		case d.Existing:
			p("%-28s -> already placed: no second slot (%d of %d unpaid)", user+" retries "+order, d.Count, d.Limit)
		case d.Allowed:
			p("%-28s -> placed, pay within %v (%d of %d unpaid)", user+" places "+order, d.Deadline.Sub(time.Now()).Round(100*time.Millisecond), d.Count, d.Limit)
		default:
			p("%-28s -> refused: %d unpaid orders, retry in %v", user+" places "+order, d.Count, d.RetryAfter.Round(100*time.Millisecond))
		}
		return nil
	}

	if err := place("order-1"); err != nil {
		return err
	}
	if err := sleep(ctx, ttl/3); err != nil {
		return err
	}
	for _, o := range []string{"order-2", "order-3", "order-4", "order-3"} {
		if err := place(o); err != nil {
			return err
		}
	}
	paid, err := quota.Release(ctx, user, "order-2")
	if err != nil {
		return err
	}
	n, err := orders.Count(ctx, user)
	if err != nil {
		return err
	}
	p("%-28s -> paid: %v, slot freed (%d of 3 unpaid)", user+" pays order-2", paid, n)
	if err := place("order-4"); err != nil {
		return err
	}

	d1, err := orders.Deadline(ctx, user, "order-1")
	if err != nil {
		return err
	}
	p("")
	p("... waiting %v for order-1 to pass its deadline ...", time.Until(d1).Round(100*time.Millisecond))
	if err := sleep(ctx, time.Until(d1)+50*time.Millisecond); err != nil {
		return err
	}
	live, err := orders.Contains(ctx, user, "order-1")
	if err != nil {
		return err
	}
	p("%-28s -> expired unpaid: live=%v (no sweeper needed to hide it)", "order-1", live)
	ms, err := orders.Members(ctx, user, 0)
	if err != nil {
		return err
	}
	var left []string
	for _, m := range ms {
		left = append(left, fmt.Sprintf("%s (%v left)", m.ID, time.Until(m.Deadline).Round(100*time.Millisecond)))
	}
	p("%-28s -> %d of 3: %s", user+" unpaid", len(ms), strings.Join(left, ", "))
	d, err := quota.Acquire(ctx, user, "order-5", ttl)
	if err != nil {
		return err
	}
	p("%-28s -> placed: %v (%d of %d unpaid)", user+" places order-5", d.Allowed, d.Count, d.Limit)
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// cleanup deletes the demo set's keys, so a demo on a real server leaves
// nothing behind.
func cleanup(c *conn, s *expset.Set) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = expset.Drop(ctx, c.rdb, s.Name())
}
