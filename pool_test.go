package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// inFlight counts a handler's calls under way: the peak, and violations of
// "one call of an event at a time" and of "attempts go 1, 2, ... with no
// repeat".
type inFlight struct {
	mu       sync.Mutex
	now      int
	peak     int
	running  map[string]bool  // event key -> a call is under way
	attempts map[string][]int // event key -> the attempts of its calls, in order
	twice    []string         // events handled twice at once
	full     chan struct{}    // closed once want calls run at once
	want     int
}

func newInFlight(want int) *inFlight {
	return &inFlight{running: map[string]bool{}, attempts: map[string][]int{}, full: make(chan struct{}), want: want}
}

// enter records the start of a call of e.
func (f *inFlight) enter(e Expiry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := eventKey(e)
	if f.running[k] {
		f.twice = append(f.twice, k)
	}
	f.running[k] = true
	f.attempts[k] = append(f.attempts[k], e.Attempt)
	f.now++
	if f.now > f.peak {
		f.peak = f.now
		if f.peak == f.want {
			close(f.full)
		}
	}
}

// leave records the end of a call of e.
func (f *inFlight) leave(e Expiry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.running, eventKey(e))
	f.now--
}

// check fails t on any event handled twice at once, any attempt sequence
// other than 1, 2, ..., and (with events > 0) a count of events handled
// other than events.
func (f *inFlight) check(t *testing.T, events int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.twice) > 0 {
		t.Errorf("events handled twice at once: %v", f.twice)
	}
	for k, as := range f.attempts {
		for j, a := range as {
			if a != j+1 {
				t.Errorf("event %s: attempts %v, want 1, 2, ...", k, as)
				break
			}
		}
	}
	if events > 0 && len(f.attempts) != events {
		t.Errorf("%d events handled, want %d", len(f.attempts), events)
	}
}

func (f *inFlight) peakNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak
}

// TestConsumeConcurrencyRunsAtOnce: with WithConcurrency(8), eight handler
// calls run at once (each of the first calls waits until eight are under
// way: a Consume running fewer would never get there), never more, each
// event once at attempt 1, and everything is acknowledged.
func TestConsumeConcurrencyRunsAtOnce(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const n, events = 8, 60
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, events)
		f := newInFlight(n)
		stop := consumeInBackground(t, s, "g", "c1", func(ctx context.Context, e Expiry) error {
			f.enter(e)
			defer f.leave(e)
			select {
			case <-f.full:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}, WithConcurrency(n), WithPollInterval(5*time.Millisecond))
		waitFor(t, "every event handled and acknowledged", func() bool {
			f.mu.Lock()
			handled := len(f.attempts)
			f.mu.Unlock()
			return handled == events && drained(s)
		})
		stop()
		if p := f.peakNow(); p != n {
			t.Errorf("peak of %d calls at once, want %d", p, n)
		}
		f.check(t, events)
		for k, as := range f.attempts {
			if len(as) != 1 {
				t.Errorf("event %s: calls %v, want one", k, as)
			}
		}
	})
}

// TestConsumeConcurrencySlowCallHoldsNoOne: a call that lasts until every
// other event is handled, and then two lease TTLs more, does not hold up
// the others (with one call at a time it would wait forever), and its lease
// is renewed all the while: a second consumer of the group never gets its
// event.
func TestConsumeConcurrencySlowCallHoldsNoOne(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const events = 30
		const vis = 600 * time.Millisecond
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, events)
		f := newInFlight(0)
		others := make(chan struct{})
		var mu sync.Mutex
		var slow string
		fast := 0
		handle := func(ctx context.Context, e Expiry) error {
			f.enter(e)
			defer f.leave(e)
			mu.Lock()
			first := slow == ""
			if first {
				slow = eventKey(e)
			}
			mu.Unlock()
			if first {
				select {
				case <-others:
					time.Sleep(2 * vis) // the lease must be renewed to last this
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			}
			mu.Lock()
			if fast++; fast == events-1 {
				close(others)
			}
			mu.Unlock()
			return nil
		}
		opts := []ConsumeOption{WithConcurrency(4), WithLeaseTTL(vis), WithPollInterval(5 * time.Millisecond)}
		stop1 := consumeInBackground(t, s, "g", "c1", handle, opts...)
		stop2 := consumeInBackground(t, s, "g", "c2", handle, opts...)
		waitFor(t, "every event handled and acknowledged", func() bool {
			f.mu.Lock()
			handled := len(f.attempts)
			f.mu.Unlock()
			return handled == events && drained(s)
		})
		stop1()
		stop2()
		f.check(t, events)
		for k, as := range f.attempts {
			if len(as) != 1 {
				t.Errorf("event %s: calls %v, want one (slow: %s)", k, as, slow)
			}
		}
	})
}

// TestConsumeConcurrencyStopReleases: a Consume WithConcurrency(4) stopped
// while its four calls run waits for them, charges none of them (each
// returns the context's error), and releases them: another consumer gets
// every event at attempt 1 at once, not a lease TTL later.
func TestConsumeConcurrencyStopReleases(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const events = 12
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, events)
		f := newInFlight(4)
		var returned sync.WaitGroup
		stop := consumeInBackground(t, s, "g", "c1", func(ctx context.Context, e Expiry) error {
			f.enter(e)
			defer f.leave(e)
			returned.Add(1)
			defer returned.Done()
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // Consume waits for this
			return ctx.Err()
		}, WithConcurrency(4), WithLeaseTTL(time.Hour), WithPollInterval(5*time.Millisecond))
		<-f.full
		stop()
		f.mu.Lock()
		if f.now != 0 {
			t.Errorf("Consume returned with %d calls under way", f.now)
		}
		f.mu.Unlock()
		ctx := context.Background()
		for i, sk := range s.shards {
			if n := b.client(t).HLen(ctx, sk.Att).Val(); n != 0 {
				t.Errorf("shard %d: %d attempt counts left after a stop", i, n)
			}
		}
		var rec recorder
		stop2 := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			rec.add(e)
			return nil
		}, WithLeaseTTL(time.Hour), WithPollInterval(5*time.Millisecond))
		waitFor(t, "every event handled by the heir", func() bool { return drained(s) })
		stop2()
		for _, e := range rec.events() {
			if e.Attempt != 1 {
				t.Errorf("event %s: attempt %d after a stop, want 1", eventKey(e), e.Attempt)
			}
		}
		if rec.len() != events {
			t.Errorf("the heir handled %d events, want %d", rec.len(), events)
		}
	})
}

// TestConsumeConcurrencyContention: two Consume calls WithConcurrency(8) of
// one group, handlers failing each event's first two calls: no event is
// handled twice at once, every event's calls see attempts 1, 2, 3 in
// order, and every event is acknowledged.
func TestConsumeConcurrencyContention(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const events = 80
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, events)
		f := newInFlight(0)
		var violations sync.Map
		handle := func(_ context.Context, e Expiry) error {
			f.enter(e)
			defer f.leave(e)
			time.Sleep(time.Millisecond)
			if e.Attempt < 3 {
				return errors.New("not yet")
			}
			if e.Attempt > 3 {
				violations.Store(eventKey(e), e.Attempt)
			}
			return nil
		}
		opts := []ConsumeOption{WithConcurrency(8), WithLeaseTTL(time.Second), WithRetryBackoff(20*time.Millisecond, 100*time.Millisecond), WithPollInterval(5 * time.Millisecond)}
		var stops []func()
		for _, name := range []string{"c1", "c2"} {
			stops = append(stops, consumeInBackground(t, s, "g", name, handle, opts...))
		}
		waitFor(t, "every event handled and acknowledged", func() bool { return drained(s) })
		for _, stop := range stops {
			stop()
		}
		f.check(t, events)
		for k, as := range f.attempts {
			if fmt.Sprint(as) != "[1 2 3]" {
				t.Errorf("event %s: attempts %v, want [1 2 3]", k, as)
			}
		}
		violations.Range(func(k, v any) bool { t.Errorf("event %v: attempt %v", k, v); return true })
		if d := must[[]DeadLetter](t)(s.DeadLetters(context.Background(), allShards, 0)); len(d) != 0 {
			t.Errorf("%d dead letters", len(d))
		}
	})
}

// TestConsumeConcurrencyOption: WithConcurrency refuses 0, negatives and
// more than 1000, naming the option.
func TestConsumeConcurrencyOption(t *testing.T) {
	for _, n := range []int{0, -1, maxConcurrency + 1} {
		var c consumeConfig
		err := WithConcurrency(n).applyConsume(&c)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "WithConcurrency("+strconv.Itoa(n)+")") {
			t.Errorf("WithConcurrency(%d): %v", n, err)
		}
	}
	for _, n := range []int{1, 16, maxConcurrency} {
		var c consumeConfig
		if err := WithConcurrency(n).applyConsume(&c); err != nil || c.concurrency != n {
			t.Errorf("WithConcurrency(%d): %v, %d", n, err, c.concurrency)
		}
	}
}
