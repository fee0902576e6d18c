package expset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/store"
)

// Tests of the delivery contract of Consume: what an attempt is, leases,
// burials, deleted streams, fan-out, and consumers leaving their groups.

// steady are options for tests that count handler calls exactly: with a
// one-second lease TTL no lease lapses on a loaded machine, so
// nothing is handled twice. The tests sweep when they choose to
// (SweepOnce on a fake clock): the consumers run no sweeper.
var steady = []ConsumeOption{WithLeaseTTL(time.Second), WithPollInterval(5 * time.Millisecond), WithoutSweeper()}

// handledBy records, per event (shard/ID), the attempts with which handler
// calls that returned nil saw it, and which consumer made them.
type handledBy struct {
	mu    sync.Mutex
	calls map[string][]string // event -> "consumer@attempt" per call
	ok    map[string]int      // event -> calls that returned nil
	all   []Expiry
}

func newHandledBy() *handledBy {
	return &handledBy{calls: map[string][]string{}, ok: map[string]int{}}
}

func (h *handledBy) call(consumer string, e Expiry, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := eventKey(e)
	h.calls[k] = append(h.calls[k], fmt.Sprintf("%s@%d", consumer, e.Attempt))
	if err == nil {
		h.ok[k]++
	}
	h.all = append(h.all, e)
	return err
}

func (h *handledBy) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ok)
}

func (h *handledBy) events() []Expiry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Expiry(nil), h.all...)
}

// deadKeys returns the events (shard/former ID) in s's dead-letter streams.
func deadKeys(t *testing.T, s *Set) map[string]DeadLetter {
	t.Helper()
	out := map[string]DeadLetter{}
	for _, d := range must[[]DeadLetter](t)(s.DeadLetters(context.Background(), allShards, 0)) {
		out[eventKey(d.Event)] = d
	}
	return out
}

// TestConsumeUnhandledNeverBuried: reading an event, holding it in a batch
// behind a stuck handler call, and a graceful shutdown charge no attempt.
// With WithMaxAttempts(1) no event is dead-lettered that no handler call
// failed on, and every event's first handler call sees Attempt 1 (also with
// the default 5 attempts).
func TestConsumeUnhandledNeverBuried(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	for _, maxAttempts := range []int{1, defaultMaxAttempts} {
		t.Run("max"+strconv.Itoa(maxAttempts), func(t *testing.T) {
			t.Parallel()
			testConsumeUnhandledNeverBuried(t, maxAttempts)
		})
	}
}

// testConsumeUnhandledNeverBuried is TestConsumeUnhandledNeverBuried with
// maxAttempts attempts.
func testConsumeUnhandledNeverBuried(t *testing.T, maxAttempts int) {
	eachBackend(t, func(t *testing.T, b backend) {
		// One stuck handler call with 10 events read: the 9 behind it go
		// to another consumer, each at attempt 1.
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 10)
		// The lease is long enough for its renewals to keep it on a
		// loaded machine (they run every third of it).
		opts := []ConsumeOption{WithLeaseTTL(600 * time.Millisecond), WithPollInterval(5 * time.Millisecond),
			WithMaxAttempts(maxAttempts), WithReadBatch(10)}
		h := newHandledBy()
		stuck := make(chan struct{})
		var once sync.Once
		stopA := consumeInBackground(t, s, "g", "a", func(_ context.Context, e Expiry) error {
			once.Do(func() { close(stuck); time.Sleep(2 * time.Second) }) // past 3 lease TTLs
			return h.call("a", e, nil)
		}, opts...)
		<-stuck
		stopB := consumeInBackground(t, s, "g", "b", func(_ context.Context, e Expiry) error {
			return h.call("b", e, nil)
		}, opts...)
		waitFor(t, "10 events handled", func() bool { return h.count() == 10 && shardsIdle(s, 0) })
		stopA()
		stopB()
		for _, e := range h.events() {
			if e.Attempt != 1 {
				t.Errorf("max %d: %s: handler call with attempt %d, want 1: %v", maxAttempts, eventKey(e), e.Attempt, h.calls[eventKey(e)])
			}
		}
		if d := deadKeys(t, s); len(d) != 0 {
			t.Fatalf("max %d: %d dead letters of events no handler call failed on: %v", maxAttempts, len(d), d)
		}

		// A graceful shutdown after the first event, then a restart: the
		// 9 read and not handed out come back at once (the lease TTL
		// is a minute), at attempt 1.
		s, clk = newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 10)
		opts = []ConsumeOption{WithLeaseTTL(time.Minute), WithPollInterval(5 * time.Millisecond),
			WithMaxAttempts(maxAttempts), WithReadBatch(10)}
		h = newHandledBy()
		ctx, shutdown := context.WithCancel(context.Background())
		err := s.Consume(ctx, "g", "w1", func(_ context.Context, e Expiry) error {
			shutdown()
			return h.call("w1", e, nil)
		}, opts...)
		if err != nil || h.count() != 1 {
			t.Fatalf("max %d: first run: %v, %d handled", maxAttempts, err, h.count())
		}
		stop := consumeInBackground(t, s, "g", "w1", func(_ context.Context, e Expiry) error {
			return h.call("w1", e, nil)
		}, opts...)
		waitFor(t, "the other 9 events after the restart", func() bool { return h.count() == 10 && shardsIdle(s, 0) })
		stop()
		for _, e := range h.events() {
			if e.Attempt != 1 {
				t.Errorf("max %d: after the restart %s: attempt %d, want 1", maxAttempts, eventKey(e), e.Attempt)
			}
		}
	})
}

// TestConsumeHungHandlerKeepsLease: two consumers of a group, one with a
// handler call that runs for four lease TTLs and then returns nil.
// Its lease holds: the other consumer never gets that event, handles the
// events queued behind it at attempt 1, and no event is both handled and
// dead-lettered, or dead-lettered at all.
func TestConsumeHungHandlerKeepsLease(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const vis = 500 * time.Millisecond // renewed every third: enough on a loaded machine
		s := oneShardEvents(t, b, 10)
		opts := []ConsumeOption{WithLeaseTTL(vis), WithPollInterval(5 * time.Millisecond), WithMaxAttempts(2)}
		h := newHandledBy()
		hung := make(chan string, 1)
		var first atomic.Bool
		stopA := consumeInBackground(t, s, "g", "a", func(_ context.Context, e Expiry) error {
			if first.CompareAndSwap(false, true) {
				hung <- eventKey(e)
				time.Sleep(4 * vis) // ignores its context
			}
			return h.call("a", e, nil)
		}, opts...)
		hungKey := <-hung
		stopB := consumeInBackground(t, s, "g", "b", func(_ context.Context, e Expiry) error {
			if eventKey(e) == hungKey {
				t.Errorf("b got %s while a's handler call of it ran", hungKey)
			}
			return h.call("b", e, nil)
		}, opts...)
		waitFor(t, "every event handled", func() bool { return h.count() == 10 && shardsIdle(s, 0) })
		stopA()
		stopB()
		dead := deadKeys(t, s)
		for _, e := range h.events() {
			if e.Attempt != 1 {
				t.Errorf("%s: attempt %d, want 1 (%v)", eventKey(e), e.Attempt, h.calls[eventKey(e)])
			}
			if _, ok := dead[eventKey(e)]; ok {
				t.Errorf("%s handled with nil and dead-lettered", eventKey(e))
			}
		}
		if len(dead) != 0 {
			t.Fatalf("dead letters: %v", dead)
		}
	})
}

// TestConsumeHandlerContext: the handler's context ends when its lease is
// lost (another consumer took the event: cause ErrLeaseLost) and
// after WithMaxHandlingTime (cause context.DeadlineExceeded); a call that fails so
// used its attempt. A lease is renewed while the call runs.
func TestConsumeHandlerContext(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		ctx := context.Background()
		sk := s.shards[0]

		// Max handling time: 1s, with a lease of 300ms renewed meanwhile.
		expire(t, s, clk, 1)
		causes := make(chan error, 2)
		var attempts []int
		var mu sync.Mutex
		stop := consumeInBackground(t, s, "g", "c", func(hctx context.Context, e Expiry) error {
			mu.Lock()
			attempts = append(attempts, e.Attempt)
			mu.Unlock()
			if e.Attempt == 1 {
				<-hctx.Done()
				causes <- context.Cause(hctx)
				return hctx.Err()
			}
			return nil
		}, WithLeaseTTL(300*time.Millisecond), WithPollInterval(5*time.Millisecond), WithMaxHandlingTime(time.Second), WithRetryBackoff(0, 0))
		if c := <-causes; !errors.Is(c, context.DeadlineExceeded) {
			t.Fatalf("cause %v, want context.DeadlineExceeded", c)
		}
		waitFor(t, "the second attempt", func() bool { return shardsIdle(s, 0) })
		stop()
		if fmt.Sprint(attempts) != "[1 2]" {
			t.Fatalf("attempts %v, want [1 2]", attempts)
		}

		// Lease lost: another call of the event begins under the handler
		// (as when this one lost Redis past the lease TTL): the thief
		// claims it and its begin writes its own token.
		expire(t, s, clk, 1)
		inCall := make(chan Expiry, 1)
		stop = consumeInBackground(t, s, "g", "c", func(hctx context.Context, e Expiry) error {
			inCall <- e
			<-hctx.Done()
			causes <- context.Cause(hctx)
			return hctx.Err()
		}, WithLeaseTTL(60*time.Millisecond), WithPollInterval(5*time.Millisecond))
		e := <-inCall
		if err := b.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: sk.Events, Group: "g", Consumer: "thief", Messages: []string{e.ID}}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.HSet(ctx, sk.Att, e.ID+" g", "2 thief").Err(); err != nil {
			t.Fatal(err)
		}
		if c := <-causes; !errors.Is(c, ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", c)
		}
		stop()
	})
}

// TestConsumeEveryBurialReachesOnEvent: dead letters made by a failing
// handler call and by the claim of an event whose last handler call never
// returned (its consumer died) each reach Hooks.OnEvent exactly once.
func TestConsumeEveryBurialReachesOnEvent(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		var hr hookRecorder
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithHooks(hr.hooks()))
		expire(t, s, clk, 10)
		opts := append(fastConsume, WithMaxAttempts(1))
		crashInHandler(t, b.client(t), s, "g", "doomed", opts...)
		stop := consumeInBackground(t, s, "g", "heir", func(context.Context, Expiry) error {
			return errors.New("always")
		}, opts...)
		waitFor(t, "10 dead letters", func() bool { return shardsIdle(s, 10) })
		stop()
		dead := deadKeys(t, s)
		claimed := 0
		for _, d := range dead {
			if d.Error != "always" {
				claimed++
			}
		}
		if claimed != 1 {
			t.Errorf("%d dead letters by claim, want 1 (the crashed handler call's): %v", claimed, dead)
		}
		if n := hr.deadLettered(); n != len(dead) {
			t.Fatalf("OnEvent saw %d burials, want %d", n, len(dead))
		}
	})
}

// TestConsumeSurvivesDeletedStream: streams deleted under a running
// Consume (an operator's DEL, Drop and a new set of the same name) never end
// it: the groups are made again, declared groups too, and later events are
// handled.
func TestConsumeSurvivesDeletedStream(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var hr hookRecorder
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithHooks(hr.hooks()))
		var rec recorder
		stop := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error {
			rec.add(e)
			return nil
		}, fastConsume...)
		expire(t, s, clk, 4)
		waitFor(t, "4 events", func() bool { return rec.len() == 4 })
		for i := range s.shards {
			b.rdb.Del(ctx, s.shards[i].Events)
		}
		time.Sleep(100 * time.Millisecond) // several claims and reads find no group
		expire(t, s, clk, 4)
		waitFor(t, "4 more events after the DEL", func() bool { return rec.len() == 8 })

		// Drop, and the set opened again under the same name.
		must[int](t)(Drop(ctx, b.rdb, s.Name()))
		time.Sleep(100 * time.Millisecond)
		s2 := must[*Set](t)(Open(context.Background(), b.rdb, s.Name(), WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithClock(clk.Now)))
		expire(t, s2, clk, 4)
		waitFor(t, "4 more events after Drop", func() bool { return rec.len() == 12 })
		stop()
		for _, e := range hr.errors() {
			if !store.IsNoGroup(e.Err) {
				t.Errorf("reported %+v, want only NOGROUP", e)
			}
		}
	})
}

// TestConsumeFanOut: every consumer group receives every event, also a
// group whose consumers were all stopped while another group handled
// everything; an event leaves its stream once every group has handled it.
func TestConsumeFanOut(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithPayloadStorage())
		got := map[string]*handledBy{"billing": newHandledBy(), "email": newHandledBy()}
		start := func(g string) (stops []func()) {
			for _, c := range []string{"c1", "c2"} {
				stops = append(stops, consumeInBackground(t, s, g, c, func(_ context.Context, e Expiry) error {
					return got[g].call(c, e, nil)
				}, steady...))
			}
			return stops
		}
		stopAll := func(stops []func()) {
			for _, stop := range stops {
				stop()
			}
		}
		billing, email := start("billing"), start("email")
		waitFor(t, "both groups on every shard", func() bool {
			for i := range s.shards {
				if gs, err := b.rdb.XInfoGroups(context.Background(), s.shards[i].Events).Result(); err != nil || len(gs) != 2 {
					return false
				}
			}
			return true
		})
		stopAll(email)
		expire(t, s, clk, 20)
		waitFor(t, "20 events in billing", func() bool { return got["billing"].count() == 20 })
		email = start("email")
		waitFor(t, "20 events in email", func() bool { return got["email"].count() == 20 && shardsIdle(s, 0) })
		stopAll(billing)
		stopAll(email)
		for g, h := range got {
			if n := len(h.events()); n != 20 {
				t.Errorf("%s: %d handler calls for 20 events", g, n)
			}
		}
	})
}

// TestConsumeDeclaredGroups: groups declared with WithConsumerGroups keep
// their events before their first Consume; a group never seen before starts
// at the oldest event retained; an event leaves the stream once every group
// has handled or buried it; a dead letter kicked back reaches only the group
// that buried it.
func TestConsumeDeclaredGroups(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("billing", "email"))
		expire(t, s, clk, 10)
		events := func() (n int64) {
			for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
				n += st.Events
			}
			return n
		}
		run := func(group string, fail string, until func(h *handledBy) bool) *handledBy {
			t.Helper()
			h := newHandledBy()
			stop := consumeInBackground(t, s, group, "c", func(_ context.Context, e Expiry) error {
				if e.Owner == fail {
					return h.call("c", e, errors.New("no"))
				}
				return h.call("c", e, nil)
			}, append(steady, WithMaxAttempts(1))...)
			waitFor(t, group, func() bool { return until(h) })
			time.Sleep(30 * time.Millisecond) // nothing more comes
			stop()
			return h
		}
		// billing fails o3's event once, which buries it.
		billing := run("billing", "o3", func(h *handledBy) bool { return h.count() == 9 && len(deadKeys(t, s)) == 1 })
		if n := events(); billing.count() != 9 || n != 10 {
			t.Fatalf("billing handled %d, the streams hold %d; want 9, and all 10 kept for email", billing.count(), n)
		}
		// A group never seen before starts at the oldest event retained.
		late := run("late", "", func(h *handledBy) bool { return h.count() == 10 })
		email := run("email", "", func(h *handledBy) bool { return h.count() == 10 })
		if n := events(); n != 0 {
			t.Fatalf("%d events left after every group handled or buried them", n)
		}
		for _, h := range []*handledBy{billing, late, email} {
			if n := len(h.events()); n != 10 {
				t.Errorf("%d handler calls for 10 events", n)
			}
		}

		// Kicked back, billing's dead letter reaches billing only.
		dead := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0))
		if len(dead) != 1 || dead[0].Group != "billing" || dead[0].Event.Owner != "o3" {
			t.Fatalf("dead letters %+v", dead)
		}
		if n := must[int](t)(s.Kick(ctx, dead...)); n != 1 {
			t.Fatalf("kicked %d", n)
		}
		after := map[string]*handledBy{}
		var stops []func()
		for _, g := range []string{"billing", "email", "late"} {
			h := newHandledBy()
			after[g] = h
			stops = append(stops, consumeInBackground(t, s, g, "c", func(_ context.Context, e Expiry) error {
				return h.call("c", e, nil)
			}, steady...))
		}
		waitFor(t, "the kicked event handled and gone", func() bool { return after["billing"].count() == 1 && events() == 0 })
		for _, stop := range stops {
			stop()
		}
		if e := after["billing"].events(); len(e) != 1 || e[0].Owner != "o3" || e[0].Attempt != 1 {
			t.Fatalf("billing after the kick: %+v", e)
		}
		if n := len(after["email"].events()) + len(after["late"].events()); n != 0 {
			t.Fatalf("%d handler calls of the kicked event in other groups", n)
		}
	})
}

// TestConsumeShardFailureIsolated: a shard whose stream key holds another
// type (WRONGTYPE) fails on its own: Consume reports it to Hooks.OnError,
// keeps handling the other shard's events, and takes the shard up again
// once it heals.
func TestConsumeShardFailureIsolated(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var hr hookRecorder
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithHooks(hr.hooks()))
		bad := s.shards[1].Events
		must[string](t)(b.rdb.Set(ctx, bad, "not a stream", 0).Result())
		var rec recorder
		stop := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error {
			rec.add(e)
			return nil
		}, fastConsume...)
		// Shard 0 works meanwhile. The sweep of shard 1 is left alone: its
		// key is broken too.
		for i, added := 0, 0; added < 3; i++ {
			if o := fmt.Sprintf("a%d", i); s.ShardOf(o) == 0 {
				must[time.Time](t)(s.Add(ctx, o, "m", time.Second))
				added++
			}
		}
		clk.Advance(time.Second)
		_, _ = newSweeper(t, s).SweepOnce(ctx)
		waitFor(t, "shard 0's events", func() bool { return rec.len() == 3 })
		waitFor(t, "shard 1's errors reported", func() bool {
			for _, e := range hr.errors() {
				if e.Shard == 1 && e.Op == "consume" && strings.Contains(e.Err.Error(), "WRONGTYPE") {
					return true
				}
			}
			return false
		})
		for _, e := range hr.errors() {
			if e.Op == "consume" && e.Shard != 1 {
				t.Errorf("error reported for shard %d: %+v", e.Shard, e)
			}
		}
		// Healed: the shard's events come.
		b.rdb.Del(ctx, bad)
		for i, added := 0, 0; added < 3; i++ {
			if o := fmt.Sprintf("b%d", i); s.ShardOf(o) == 1 {
				must[time.Time](t)(s.Add(ctx, o, "m", time.Second))
				added++
			}
		}
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		waitFor(t, "shard 1's events after it healed", func() bool { return rec.len() == 6 && shardsIdle(s, 0) })
		stop()
	})
}

// TestConsumeLeavesNothingBehind: 30 short-lived workers, each shut down
// gracefully mid-batch, and one that crashed in its handler: the consumers
// that stop with nothing pending leave their group at once, and the others
// are removed by a later worker once it has claimed their events. Nothing is
// left behind, and every event was handled.
func TestConsumeLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 100)
		h := newHandledBy()
		crashInHandler(t, b.client(t), s, "g", "crashed", fastConsume...)
		for w := 0; w < 30; w++ {
			name := fmt.Sprintf("w%d", w)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n := 0
			err := s.Consume(ctx, "g", name, func(_ context.Context, e Expiry) error {
				if n++; n == 2 {
					cancel() // mid-batch
				}
				return h.call(name, e, nil)
			}, fastConsume...)
			timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
			cancel()
			if err != nil || timedOut {
				t.Fatalf("%s: %v (timed out: %v)", name, err, timedOut)
			}
		}
		stop := consumeInBackground(t, s, "g", "last", func(_ context.Context, e Expiry) error {
			return h.call("last", e, nil)
		}, fastConsume...)
		waitFor(t, "every event handled and only the last worker left", func() bool {
			cs := consumers(t, b.rdb, s, "g")
			return h.count() == 100 && shardsIdle(s, 0) && len(cs) <= 2 && !slices.ContainsFunc(cs, func(c string) bool { return !strings.HasSuffix(c, "/last") })
		})
		stop()
		if cs := consumers(t, b.rdb, s, "g"); len(cs) != 0 {
			t.Fatalf("consumers left: %v", cs)
		}
	})
}
