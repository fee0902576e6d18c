package expset

import (
	"context"
	"errors"
	"github.com/expset/expset/internal/store"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeOver makes event id of s's shard 0 another call's, as a consumer
// that claimed it after its lease lapsed and began it would: it holds it
// pending and its token is in the event's attempts field.
func takeOver(t *testing.T, b backend, s *Set, group, id string) {
	t.Helper()
	ctx := context.Background()
	sk := s.shards[0]
	if err := b.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: sk.Events, Group: group, Consumer: "thief", Messages: []string{id}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.HSet(ctx, sk.Att, id+" "+group, "2 thief").Err(); err != nil {
		t.Fatal(err)
	}
}

// heldBy returns the consumer holding event id of s's shard 0 pending in
// group, and its attempts field ("" when none).
func heldBy(t *testing.T, b backend, s *Set, group, id string) (string, string) {
	t.Helper()
	ctx := context.Background()
	sk := s.shards[0]
	p, err := b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: sk.Events, Group: group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	att, err := b.rdb.HGet(ctx, sk.Att, id+" "+group).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if len(p) == 0 {
		return "", att
	}
	return p[0].Consumer, att
}

// TestReservationActsOnItsOwnLeaseOnly: once another call of its event has
// begun, a reservation's Finish (nil, a failure, Bury) and Touch change
// nothing and return ErrLeaseLost; the other call keeps the event.
func TestReservationActsOnItsOwnLeaseOnly(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		for _, finish := range []error{nil, errors.New("failed"), Bury(errors.New("buried")), RetryAfter(errors.New("later"), time.Millisecond)} {
			s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
			expire(t, s, clk, 1)
			r := reserve(t, s, "c", WithLeaseTTL(time.Minute), WithPollInterval(10*time.Millisecond))
			takeOver(t, b, s, "g", r.Expiry.ID)
			if err := r.Finish(ctx, finish); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("Finish(%v) of a reservation whose event another call began: %v, want ErrLeaseLost", finish, err)
			}
			if err := r.Touch(ctx); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("Touch after: %v, want ErrLeaseLost", err)
			}
			if holder, att := heldBy(t, b, s, "g", r.Expiry.ID); holder != "thief" || att != "2 thief" {
				t.Fatalf("after Finish(%v): held by %q with attempts %q, want the thief's call untouched", finish, holder, att)
			}
			if dead := deadKeys(t, s); len(dead) != 0 {
				t.Fatalf("after Finish(%v): %d dead letters, want none", finish, len(dead))
			}
		}
	})
}

// TestConsumeCallActsOnItsOwnLeaseOnly: a handler call whose event another
// call began sees its context end with ErrLeaseLost, and what it returns
// then (nil here) acknowledges nothing: the other call keeps the event.
func TestConsumeCallActsOnItsOwnLeaseOnly(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 1)
		in := make(chan Expiry, 1)
		causes := make(chan error, 1)
		stop := consumeInBackground(t, s, "g", "c", func(hctx context.Context, e Expiry) error {
			in <- e
			<-hctx.Done()
			causes <- context.Cause(hctx)
			return nil
		}, WithLeaseTTL(300*time.Millisecond), WithPollInterval(5*time.Millisecond))
		e := <-in
		takeOver(t, b, s, "g", e.ID)
		if c := <-causes; !errors.Is(c, ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", c)
		}
		stop() // waits for the call and sends what it left to acknowledge
		if holder, att := heldBy(t, b, s, "g", e.ID); holder != "thief" || att != "2 thief" {
			t.Fatalf("held by %q with attempts %q, want the thief's call untouched", holder, att)
		}
	})
}

// TestOwnerCapHoldsWhenAConsumerReleases: a consumer that stops releases
// the events it read and set aside; one of them may meanwhile be running
// under another consumer (it lapsed unbegun where it was set aside, and
// the other claimed and began it). The release leaves that call's owner
// slot alone, so no other call of the owner begins while it runs.
func TestOwnerCapHoldsWhenAConsumerReleases(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		must[time.Time](t)(s.Add(ctx, "x", "m1", time.Second))
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		opts := []ConsumeOption{WithOwnerConcurrency(1), WithLeaseTTL(time.Minute), WithPollInterval(5 * time.Millisecond), WithoutSweeper()}
		in := make(chan Expiry, 2)
		release := make(chan struct{})
		var once sync.Once
		stopB := consumeInBackground(t, s, "g", "b", func(_ context.Context, e Expiry) error {
			in <- e
			<-release
			return nil
		}, opts...)
		defer once.Do(func() { close(release) })
		e1 := <-in

		// Consumer a had read the event and set it aside, and releases it
		// as it stops.
		cfg := defaultConsumeConfig()
		cfg.ownerCap, cfg.leaseTTL = 1, time.Minute
		a := must[*consumer](t)(s.newConsumer("g", "a", cfg))
		a.release(ctx, []delivery{{shard: 0, id: e1.ID}}, nil)
		if first, _ := store.SlotFields("g", "x"); !b.rdb.HExists(ctx, s.shards[0].Runo, first).Val() {
			t.Fatal("owner x holds no slot after the release, want 1: its running call lost its slot")
		}

		// Another event of x is read by a third consumer and set aside,
		// not begun, while the first call runs.
		must[time.Time](t)(s.Add(ctx, "x", "m2", time.Second))
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		stopC := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error {
			in <- e
			return nil
		}, opts...)
		ids := must[[]redis.XMessage](t)(b.rdb.XRange(ctx, s.shards[0].Events, "-", "+").Result())
		if len(ids) != 2 {
			t.Fatalf("%d events in the stream, want 2", len(ids))
		}
		e2 := ids[1].ID
		waitFor(t, "the second event read and set aside by c", func() bool {
			holder, _ := heldBy(t, b, s, "g", e2)
			return holder == "c"
		})
		if _, att := heldBy(t, b, s, "g", e2); att != "" {
			t.Fatalf("the second event of x was begun (attempts %q) while the first ran under a cap of 1", att)
		}
		once.Do(func() { close(release) })
		waitFor(t, "both events handled", func() bool { return drained(s) })
		stopC()
		stopB()
		if e := <-in; e.ID != e2 {
			t.Fatalf("second call of %s, want %s", e.ID, e2)
		}
	})
}

// TestReserveRetryAfter: a reservation finished with RetryAfter(err, d)
// comes back, to any Reserve of the group in the process (here three
// goroutines reserving under one name), no sooner than d, at its next
// attempt. How much later is logged (within milliseconds on an idle
// machine: a consumer of the group claims it when it is due).
func TestReserveRetryAfter(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const n, delay = 6, 300 * time.Millisecond
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, n)
		opts := []ReserveOption{WithLeaseTTL(10 * time.Second), WithPollInterval(10 * time.Millisecond), WithMaxAttempts(5)}
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		finished := map[string]time.Time{} // event -> when its last attempt was finished
		var late []time.Duration
		done := 0
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r, err := s.Reserve(ctx, "g", "c", opts...)
					if err != nil {
						return
					}
					key := eventKey(r.Expiry)
					mu.Lock()
					if at, ok := finished[key]; ok {
						// The server keeps idle times in whole milliseconds.
						if since := time.Since(at); since < delay-time.Millisecond {
							t.Errorf("%s came back after %v, before its delay of %v", key, since, delay)
						} else {
							late = append(late, since-delay)
						}
					}
					mu.Unlock()
					ferr := RetryAfter(errors.New("later"), delay)
					if r.Expiry.Attempt == 3 {
						ferr = nil
					}
					sent := time.Now() // the delay runs from Finish's script, after this
					if err := r.Finish(ctx, ferr); err != nil {
						t.Errorf("Finish: %v", err)
					}
					mu.Lock()
					finished[key] = sent
					if ferr == nil {
						done++
					}
					mu.Unlock()
				}
			}()
		}
		waitFor(t, "every event handled at its third attempt", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return done == n
		})
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(late) != 2*n {
			t.Fatalf("%d retries came back, want %d", len(late), 2*n)
		}
		worst := time.Duration(0)
		for _, l := range late {
			worst = max(worst, l)
		}
		t.Logf("%d retries after RetryAfter(%v): at most %v late", len(late), delay, worst.Round(time.Millisecond))
	})
}

// TestConsumeShutdownTimeout: a stopping Consume waits for a handler that
// ignores its context at most WithShutdownTimeout, then returns; that call
// settles nothing when it does return, and its event comes back to another
// consumer after the lease TTL, at its next attempt.
func TestConsumeShutdownTimeout(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 1)
		in := make(chan Expiry, 1)
		release := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		returned := make(chan error, 1)
		go func() {
			returned <- s.Consume(ctx, "g", "stubborn", func(context.Context, Expiry) error {
				in <- Expiry{}
				<-release // ignores its context
				return nil
			}, WithLeaseTTL(300*time.Millisecond), WithPollInterval(5*time.Millisecond), WithShutdownTimeout(50*time.Millisecond))
		}()
		<-in
		cancel()
		select {
		case err := <-returned:
			if err != nil {
				t.Fatalf("Consume: %v", err)
			}
		case <-time.After(30 * time.Second):
			close(release)
			t.Fatal("Consume did not return while its handler ignored the context")
		}
		close(release) // the abandoned call returns now: it settles nothing
		var rec recorder
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			rec.add(e)
			return nil
		}, WithLeaseTTL(300*time.Millisecond), WithPollInterval(5*time.Millisecond))
		waitFor(t, "the abandoned event handled by the heir", func() bool { return rec.len() == 1 })
		stop()
		if e := rec.events()[0]; e.Attempt != 2 {
			t.Fatalf("the heir's call: attempt %d, want 2", e.Attempt)
		}
	})
}
