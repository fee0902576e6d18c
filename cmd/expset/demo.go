package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/expset/expset"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

func (a *app) demoCmd() *cobra.Command {
	var ttl time.Duration
	var keep bool
	cmd := &cobra.Command{
		Use:     "demo [--redis URL] [--ttl 3s] [--keep]",
		Short:   "play the unpaid-orders story, quota to cancelled order (embedded Redis by default)",
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

// demo connects (to an embedded miniredis unless --redis is given), plays
// the story on a set of its own, and deletes the set's keys unless keep.
func (a *app) demo(ctx context.Context, ttl time.Duration, keep bool) error {
	c, err := a.connect(ctx, true)
	if err != nil {
		return err
	}
	defer c.close()
	name := "demo-orders-" + uuid.NewString()[:8]
	if !keep {
		defer cleanup(c, name)
	}
	return playDemo(ctx, c.rdb, name, c.desc, ttl, a.stdout)
}

// The story's cast.
const (
	demoUser  = "user-42"
	demoGroup = "billing"
	demoLimit = 3
)

// playDemo plays the unpaid-orders story on set name of the Redis that
// where describes, printing to w. Orders are placed under a quota of 3, the
// fourth refused, one paid; order-1, placed ttl/2 before the others, lapses
// unpaid, the sweeper turns the lapse into an expiry event and a consumer
// cancels the order; then, at the limit again, a caller waits for a slot
// (AcquireWait) and gets the one a payment frees. It takes about ttl and
// uses the public API only. Each step waits for the one before, so the
// lines come in the same order on every run and differ only in durations.
// The sweeper and the consumer run until it returns.
func playDemo(ctx context.Context, rdb redis.UniversalClient, name, where string, ttl time.Duration, w io.Writer) error {
	start := time.Now()
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	line := func(who, what string, a ...any) { p("   %-26s -> "+what, append([]any{who}, a...)...) }
	round := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

	// What the background work reports, for the story to tell in its order.
	swept := make(chan expset.SweepStats, 8)
	events := make(chan expset.Expiry, 8)
	denied := make(chan struct{}, 1)
	hooks := expset.Hooks{
		OnSweep: func(_ context.Context, _ expset.CallInfo, st expset.SweepStats) {
			if st.Expired > 0 {
				send(swept, st)
			}
		},
		OnAcquire: func(_ context.Context, _ expset.CallInfo, d expset.Decision) {
			if !d.Allowed {
				send(denied, struct{}{})
			}
		},
	}
	orders, err := expset.Open(ctx, rdb, name, expset.WithExpiryEvents(), expset.WithPayloadStorage(),
		expset.WithConsumerGroups(demoGroup), expset.WithHooks(hooks))
	if err != nil {
		return err
	}
	quota, err := expset.NewQuota(orders, demoLimit)
	if err != nil {
		return err
	}
	// The sweeper notices a deadline added after it last looked within its
	// poll interval (1s by default): shorter here, for a --ttl of 500ms.
	sweeper, err := expset.NewSweeper(orders, expset.WithPollInterval(100*time.Millisecond))
	if err != nil {
		return err
	}

	// The service's background work: a sweeper, and a consumer in the
	// billing group that cancels every order that lapsed unpaid.
	loops, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	loopErr := make(chan error, 3)
	wg.Add(2)
	go func() { defer wg.Done(); loopErr <- sweeper.Run(loops) }()
	go func() {
		defer wg.Done()
		loopErr <- orders.Consume(loops, demoGroup, "worker-1", func(_ context.Context, e expset.Expiry) error {
			send(events, e) // the cancellation itself: here, the story tells it
			return nil      // acknowledged: the event is done
		}, expset.WithoutSweeper()) // the sweeper above sweeps, with its shorter poll
	}()

	p("expset demo: at most %d unpaid orders per user; an order not paid within %v lapses and is cancelled", demoLimit, ttl)
	p("Redis: %s; set %q", where, name)
	p("")
	p("1. Orders under a quota (Quota.Acquire; paying is Set.Remove)")
	payload := func(order string) expset.WriteOption {
		return expset.WithPayload(fmt.Appendf(nil, `{"order":%q,"sku":"mug-%s","qty":1}`, order, strings.TrimPrefix(order, "order-")))
	}
	place := func(order string) error {
		d, err := quota.Acquire(ctx, demoUser, order, ttl, payload(order))
		switch {
		case err != nil:
			return err
		case d.Existing:
			line(demoUser+" retries "+order, "already placed: no second slot (%d of %d unpaid)", d.Count, d.Limit)
		case d.Allowed:
			line(demoUser+" places "+order, "placed, pay within %v (%d of %d unpaid)", round(time.Until(d.Deadline)), d.Count, d.Limit)
		default:
			line(demoUser+" places "+order, "refused: %d unpaid orders, retry in %v", d.Count, round(d.RetryAfter))
		}
		return nil
	}
	// pay removes a paid order and says what that did, in then's words
	// (then runs after the removal).
	pay := func(order string, then func() (string, error)) error {
		paid, err := orders.Remove(ctx, demoUser, order)
		if err != nil {
			return err
		}
		what := "paid too late: it had lapsed"
		if paid == 1 {
			if what, err = then(); err != nil {
				return err
			}
		}
		line(demoUser+" pays "+order, "paid, so removed: %s", what)
		return nil
	}
	if err := place("order-1"); err != nil {
		return err
	}
	if err := sleep(ctx, ttl/2); err != nil {
		return err
	}
	p("   ... %v later ...", round(ttl/2))
	for _, o := range []string{"order-2", "order-3", "order-4", "order-3"} {
		if err := place(o); err != nil {
			return err
		}
	}
	err = pay("order-2", func() (string, error) {
		n, err := orders.Count(ctx, demoUser)
		return fmt.Sprintf("slot freed (%d of %d unpaid)", n, demoLimit), err
	})
	if err != nil {
		return err
	}
	if err := place("order-4"); err != nil {
		return err
	}

	p("")
	p("2. Nobody pays order-1 (a Sweeper and a consumer run in the background)")
	d1, err := orders.Deadline(ctx, demoUser, "order-1")
	if err != nil {
		return err
	}
	p("   ... order-1 lapses in %v ...", round(time.Until(d1)))
	// Nothing else touches user-42's orders until the consumer has the
	// event, so it is the sweeper that removes order-1.
	st, err := await(ctx, swept, loopErr, ttl)
	if err != nil {
		return err
	}
	e, err := await(ctx, events, loopErr, ttl)
	if err != nil {
		return err
	}
	live, err := orders.Contains(ctx, demoUser, "order-1")
	if err != nil {
		return err
	}
	line("order-1", "lapses unpaid: no read sees it from its deadline on (live=%v)", live)
	line("sweeper", "removes %s %v after its deadline and writes its expiry event", e.Member, st.MaxLateness.Round(time.Millisecond))
	line("consumer "+demoGroup+"/worker-1", "cancels %s of %s (payload %s, attempt %d)", e.Member, e.Owner, e.Payload, e.Attempt)

	p("")
	p("3. Waiting for a slot (Quota.AcquireWait)")
	if err := place("order-5"); err != nil {
		return err
	}
	type admission struct {
		d      expset.Decision
		waited time.Duration
		held   []expset.Member // the orders right after it
		err    error
	}
	admitted := make(chan admission, 1)
	select { // forget order-4's refusal
	case <-denied:
	default:
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		began := time.Now()
		d, err := quota.AcquireWait(loops, demoUser, "order-6", ttl, payload("order-6"))
		in := admission{d: d, waited: time.Since(began), err: err}
		if err == nil {
			in.held, in.err = orders.Members(loops, demoUser, 0)
		}
		admitted <- in
	}()
	if _, err := await(ctx, denied, loopErr, ttl); err != nil {
		return err
	}
	line(demoUser+" places order-6", "waits in line: %d of %d unpaid", demoLimit, demoLimit)
	if err := pay("order-3", func() (string, error) { return "the first in line is woken at once", nil }); err != nil {
		return err
	}
	in, err := await(ctx, admitted, loopErr, ttl)
	if err == nil {
		err = in.err
	}
	if err != nil {
		return fmt.Errorf("order-6: %w", in.err)
	}
	held := make([]string, 0, len(in.held))
	for _, m := range in.held {
		held = append(held, m.ID)
	}
	line(demoUser+"'s order-6", "placed after waiting %v, in order-3's slot (%d of %d unpaid: %s)",
		in.waited.Round(time.Millisecond), in.d.Count, in.d.Limit, strings.Join(held, ", "))
	p("")
	p("expset demo: the whole story took %v", round(time.Since(start)))
	return nil
}

// await receives from ch, failing instead of waiting for ever when a
// background loop stopped (loopErr), ctx ended, or nothing came within ttl
// and 10 seconds (Redis is gone).
func await[T any](ctx context.Context, ch <-chan T, loopErr <-chan error, ttl time.Duration) (T, error) {
	var zero T
	wait, cancel := context.WithTimeout(ctx, ttl+10*time.Second)
	defer cancel()
	select {
	case v := <-ch:
		return v, nil
	case err := <-loopErr:
		if ctx.Err() != nil {
			return zero, ctx.Err() // interrupted: the loops stopped for it
		}
		return zero, fmt.Errorf("the sweeper or the consumer stopped: %v", err)
	case <-wait.Done():
		return zero, fmt.Errorf("the story did not go on: %w", wait.Err())
	}
}

// send sends v on ch unless ch is full: the story tells the first ones.
func send[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
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
func cleanup(c *conn, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = expset.Drop(ctx, c.rdb, name)
}
