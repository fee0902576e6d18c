package expset

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tests of how Consume acknowledges handled events: in batches, never so
// late that a lease lapses, and never lost on shutdown.

// callCounter counts Hooks.OnCall calls by op.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) hooks() Hooks {
	return Hooks{OnCall: func(_ context.Context, ci CallInfo) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[ci.Op]++
	}}
}

func (c *callCounter) count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// oneShardEvents returns a set of one shard, with events and payloads,
// whose stream holds n events (owners o0.., member m, payloads p0..).
func oneShardEvents(t *testing.T, b backend, n int) *Set {
	t.Helper()
	s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
	expire(t, s, clk, n)
	return s
}

// TestConsumeAcksInBatches: handled events are acknowledged by one script
// call per shard (here one; a few more on a slow machine), not one per
// event, and every event is handled once, acknowledged and deleted.
func TestConsumeAcksInBatches(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 20
		s := oneShardEvents(t, b, n)
		var calls callCounter
		observed := must[*Set](t)(Open(context.Background(), b.rdb, s.Name(), WithHooks(calls.hooks()), WithRecordedConfiguration()))
		h := newHandledBy()
		stop := consumeInBackground(t, observed, "g", "c", func(_ context.Context, e Expiry) error {
			return h.call("c", e, nil)
		}, WithLeaseTTL(time.Minute), WithPollInterval(5*time.Millisecond), WithReadBatch(n))
		waitFor(t, "every event handled and acknowledged", func() bool { return h.count() == n && shardsIdle(s, 0) })
		stop()
		for _, e := range h.events() {
			if e.Attempt != 1 {
				t.Errorf("%s: attempt %d, want 1", eventKey(e), e.Attempt)
			}
		}
		if got := len(h.events()); got != n {
			t.Errorf("%d handler calls, want %d", got, n)
		}
		// An ack waits at most 100ms: 20 handler calls take longer than
		// that only on a slow machine, and then each 100ms sends one more
		// batch (half as many as events would take 20 calls of 100ms).
		if acks := calls.count("ack"); acks > n/2 {
			t.Fatalf("%d ack script calls for %d events, want 1 (at most %d)", acks, n, n/2)
		}
	})
}

// TestConsumeCrashBeforeAckFlushRedelivers: a consumer dies after its
// handler returned nil for two events, before their acknowledgements were
// sent (they wait for the batch), and in the handler call of a third. A
// consumer of the same group then handles all three again, each with
// Attempt 2 (one handler call each before), and the rest with Attempt 1:
// at least once holds, nothing is lost or dead-lettered, and the counts stay
// exact.
func TestConsumeCrashBeforeAckFlushRedelivers(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 5
		const vis = 2 * time.Second // acknowledgements wait up to 100ms
		s := oneShardEvents(t, b, n)
		ok, crashed, took := crashAfter(t, b.client(t), s, "g", "doomed", 2, WithLeaseTTL(vis), WithPollInterval(5*time.Millisecond))
		// The acknowledgements of ok waited for the batch unless the three
		// calls began about 100ms apart or more (then they may have gone
		// with the third call's start).
		quick := took < 50*time.Millisecond
		if !quick {
			t.Logf("the three calls took %v: the first two may have been acknowledged", took)
		}
		handledBefore := map[string]bool{eventKey(crashed): true}
		for _, e := range ok {
			handledBefore[eventKey(e)] = true
		}
		h := newHandledBy()
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			return h.call("heir", e, nil)
		}, WithLeaseTTL(vis), WithPollInterval(5*time.Millisecond))
		waitFor(t, "every event handled and acknowledged", func() bool { return h.count() >= n-len(ok) && shardsIdle(s, 0) })
		stop()
		for _, e := range h.events() {
			k := eventKey(e)
			switch {
			case k == eventKey(crashed) && e.Attempt != 2:
				t.Errorf("%s: the crash cut its handler call short; attempt %d, want 2", k, e.Attempt)
			case handledBefore[k] && k != eventKey(crashed) && e.Attempt != 2:
				t.Errorf("%s: handled once, its acknowledgement lost with the consumer; attempt %d, want 2", k, e.Attempt)
			case !handledBefore[k] && e.Attempt != 1:
				t.Errorf("%s: never handled before; attempt %d, want 1", k, e.Attempt)
			}
		}
		if got, want := len(h.events()), n; got != want && quick {
			t.Errorf("the heir made %d handler calls, want %d (the 2 handled whose acknowledgements were lost, the crashed one and the 2 never reached)", got, want)
		}
		if d := deadKeys(t, s); len(d) != 0 {
			t.Fatalf("dead letters: %v", d)
		}
	})
}

// TestConsumeShutdownFlushesAcks: the acknowledgements waiting when
// Consume's context ends are sent before it returns: nothing is left
// pending or in the stream, and nothing is handled twice.
func TestConsumeShutdownFlushesAcks(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 5
		s := oneShardEvents(t, b, n)
		h := newHandledBy()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err := s.Consume(ctx, "g", "c", func(_ context.Context, e Expiry) error {
			if h.call("c", e, nil); h.count() == n {
				cancel()
			}
			return nil
		}, WithLeaseTTL(time.Minute), WithPollInterval(5*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if !shardsIdle(s, 0) {
			t.Fatalf("after Consume returned: %+v, want no events and nothing pending", must[[]ShardStats](t)(s.Stats(context.Background())))
		}
		if got := len(h.events()); got != n {
			t.Fatalf("%d handler calls, want %d", got, n)
		}
	})
}

// TestConsumeLongCallKeepsAcksFlowing: an event handled (nil) before a
// handler call that lasts three lease TTLs is acknowledged while
// that call runs, not after it: another consumer of the group never claims
// it, and with WithMaxAttempts(1) it is never dead-lettered.
func TestConsumeLongCallKeepsAcksFlowing(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const vis = 600 * time.Millisecond // renewed every third: enough on a loaded machine
		s := oneShardEvents(t, b, 2)
		opts := []ConsumeOption{WithLeaseTTL(vis), WithPollInterval(5 * time.Millisecond), WithMaxAttempts(1), WithReadBatch(2)}
		h := newHandledBy()
		var calls atomic.Int32
		long := make(chan string, 1)
		longDone := make(chan struct{})
		stopA := consumeInBackground(t, s, "g", "a", func(_ context.Context, e Expiry) error {
			if calls.Add(1) == 2 {
				long <- eventKey(e)
				time.Sleep(3 * vis) // ignores its context; its lease is renewed
				defer close(longDone)
			}
			return h.call("a", e, nil)
		}, opts...)
		longKey := <-long
		stopB := consumeInBackground(t, s, "g", "b", func(_ context.Context, e Expiry) error {
			t.Errorf("b got %s (attempt %d): a held every event", eventKey(e), e.Attempt)
			return h.call("b", e, nil)
		}, opts...)
		// The first event's acknowledgement lands while the long call runs.
		acked := false
		waitFor(t, "the first event acknowledged, or the long call's end", func() bool {
			select {
			case <-longDone:
				return true
			default:
			}
			st := must[[]ShardStats](t)(s.Stats(context.Background()))[0]
			acked = st.Pending == 1 && st.Dead == 0
			return acked || st.Dead > 0
		})
		if !acked {
			t.Fatalf("the long call ended, or an event was dead-lettered (%v), before the first event was acknowledged", deadKeys(t, s))
		}
		<-longDone
		waitFor(t, "both events handled and acknowledged", func() bool { return h.count() == 2 && shardsIdle(s, 0) })
		stopA()
		stopB()
		if d := deadKeys(t, s); len(d) != 0 {
			t.Fatalf("dead letters of events handled with nil: %v (the long call was %s)", d, longKey)
		}
		for _, e := range h.events() {
			if e.Attempt != 1 {
				t.Errorf("%s: attempt %d, want 1", eventKey(e), e.Attempt)
			}
		}
	})
}

// TestConsumeDestroyedGroupLeavesNothing: events a group held when it was
// destroyed (XGROUP DESTROY, as docs/events.md tells to retire a group)
// leave the stream with the next acknowledgement of the groups left, once
// those have finished them, instead of waiting for retention (which would
// count them as trimmed).
func TestConsumeDestroyedGroupLeavesNothing(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		stream := s.shards[0].Events
		if err := b.rdb.XGroupCreateMkStream(ctx, stream, "retired", "0").Err(); err != nil {
			t.Fatal(err)
		}
		expire(t, s, clk, 5)
		// The retired group reads (holds) every event, then is destroyed.
		if err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "retired", Consumer: "r", Streams: []string{stream, ">"}, Count: 10, Block: -1}).Err(); err != nil {
			t.Fatal(err)
		}
		h := newHandledBy()
		stop := consumeInBackground(t, s, "live", "c", func(_ context.Context, e Expiry) error {
			return h.call("c", e, nil)
		}, steady...)
		livePending := func() int64 {
			return must[*redis.XPending](t)(b.rdb.XPending(ctx, stream, "live").Result()).Count
		}
		waitFor(t, "the live group done with the first 5", func() bool { return h.count() == 5 && livePending() == 0 })
		if n := must[int64](t)(b.rdb.XLen(ctx, stream).Result()); n != 5 {
			t.Fatalf("%d entries while the retired group holds 5, want 5", n)
		}
		if err := b.rdb.XGroupDestroy(ctx, stream, "retired").Err(); err != nil {
			t.Fatal(err)
		}
		expire(t, s, clk, 3)
		waitFor(t, "the live group done with 3 more", func() bool { return h.count() == 8 && livePending() == 0 })
		stop()
		if n := must[int64](t)(b.rdb.XLen(ctx, stream).Result()); n != 0 {
			t.Fatalf("%d entries left after every remaining group finished them, want 0", n)
		}
	})
}

// TestConsumeLastAttemptAckNotDeferred: with WithMaxAttempts(1) every
// handler call is the last attempt, so a claim of an event whose
// acknowledgement still waited in a batch would bury it as "the last
// handler call did not finish". A consumer dies after its handler returned
// nil for two events (in the handler call of a third): the two were
// acknowledged at once, so the heir handles the rest and dead-letters only
// the event whose call the crash cut short.
func TestConsumeLastAttemptAckNotDeferred(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 5
		const vis = 2 * time.Second
		s := oneShardEvents(t, b, n)
		opts := []ConsumeOption{WithLeaseTTL(vis), WithPollInterval(5 * time.Millisecond), WithMaxAttempts(1)}
		ok, crashed, _ := crashAfter(t, b.client(t), s, "g", "doomed", 2, opts...)
		handled := map[string]bool{}
		for _, e := range ok {
			handled[eventKey(e)] = true
		}
		h := newHandledBy()
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			return h.call("heir", e, nil)
		}, opts...)
		waitFor(t, "every event handled or dead-lettered", func() bool { return drained(s) })
		stop()
		dead := deadKeys(t, s)
		for k := range dead {
			if handled[k] {
				t.Errorf("%s: its handler returned nil, yet it was dead-lettered", k)
			}
		}
		if _, ok := dead[eventKey(crashed)]; !ok || len(dead) != 1 {
			t.Errorf("dead letters %v, want only %s (its last call never returned)", dead, eventKey(crashed))
		}
		for _, e := range h.events() {
			if handled[eventKey(e)] {
				t.Errorf("%s handled again: its acknowledgement was lost", eventKey(e))
			}
		}
	})
}

// drained reports whether every shard's stream is empty, with nothing
// pending, however many dead letters there are.
func drained(s *Set) bool {
	stats, err := s.Stats(context.Background())
	if err != nil {
		return false
	}
	for _, st := range stats {
		if st.Events != 0 || st.Pending != 0 {
			return false
		}
	}
	return true
}
