package expset

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ownerLoad counts a handler's calls under way per owner: the peak and the
// calls over the cap (violations).
type ownerLoad struct {
	mu         sync.Mutex
	cap        int
	now, peak  map[string]int
	handled    map[string]int           // event key -> calls
	full       map[string]chan struct{} // owner -> closed once cap calls of it ran at once
	violations int
}

func newOwnerLoad(cap int) *ownerLoad {
	return &ownerLoad{cap: cap, now: map[string]int{}, peak: map[string]int{}, handled: map[string]int{}, full: map[string]chan struct{}{}}
}

func (l *ownerLoad) enter(e Expiry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now[e.Owner]++
	l.peak[e.Owner] = max(l.peak[e.Owner], l.now[e.Owner])
	if l.now[e.Owner] > l.cap {
		l.violations++
	}
	if l.now[e.Owner] == l.cap {
		select {
		case <-l.fullOf(e.Owner):
		default:
			close(l.fullOf(e.Owner))
		}
	}
	l.handled[eventKey(e)]++
}

// fullOf returns the channel closed once cap calls of owner ran at once.
// l.mu is held.
func (l *ownerLoad) fullOf(owner string) chan struct{} {
	c, ok := l.full[owner]
	if !ok {
		c = make(chan struct{})
		l.full[owner] = c
	}
	return c
}

// waitFull waits until cap calls of owner have run at once, or ctx ends;
// it reports whether they have.
func (l *ownerLoad) waitFull(ctx context.Context, owner string) bool {
	l.mu.Lock()
	c := l.fullOf(owner)
	l.mu.Unlock()
	select {
	case <-c:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *ownerLoad) leave(e Expiry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now[e.Owner]--
}

// expireOwned makes perOwner events of each of owners expire.
func expireOwned(t *testing.T, s *Set, clk *fakeClock, owners []string, perOwner int) {
	t.Helper()
	ctx := context.Background()
	for _, o := range owners {
		for i := 0; i < perOwner; i++ {
			must[time.Time](t)(s.Add(ctx, o, "m"+strconv.Itoa(i), time.Second))
		}
	}
	clk.Advance(time.Second)
	if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != len(owners)*perOwner {
		t.Fatalf("sweep: %+v %v", st, err)
	}
}

// slotsLeft counts the owner-slot entries left in Redis.
func slotsLeft(t *testing.T, s *Set) int {
	t.Helper()
	n := 0
	for i := range s.shards {
		n += int(must[int64](t)(s.rdb.HLen(context.Background(), s.shards[i].Runo).Result()))
	}
	return n
}

// TestOwnerConcurrencyCap: three Consumes of a group (two WithConcurrency(6),
// one serial) under WithOwnerConcurrency(2) never run more than two calls
// of one owner at once, reach two, and leave no slot behind; every event is
// handled once at attempt 1 (an event refused at the cap is not charged),
// but every fifth, whose first call fails (its slot freed by the retry), at
// attempts 1 and 2.
//
// To reach two, the calls of the two pools wait, up to a generous deadline,
// until two calls of their owner are under way: a Consume that never ran
// two of one owner at once would leave them waiting. The serial Consume's
// calls do not wait: its one call waiting would hold up the events it read
// ahead, and those may be all its owner has left, which no other consumer
// could take before the lease TTL. It starts once the pools have begun a
// call of every owner, so that each owner has a call that waits.
func TestOwnerConcurrencyCap(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const perOwner = 20
		owners := []string{"a", "b", "c"}
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents())
		expireOwned(t, s, clk, owners, perOwner)
		l := newOwnerLoad(2)
		var wrong sync.Map
		var (
			mu     sync.Mutex
			pooled = map[string]bool{} // owners of a call of the pools
		)
		// Long enough for any loaded machine: a call waits for it only
		// until the second call of its owner begins.
		pairs, cancel := context.WithTimeout(context.Background(), killWait)
		t.Cleanup(cancel)
		handler := func(pool bool) func(context.Context, Expiry) error {
			return func(_ context.Context, e Expiry) error {
				l.enter(e)
				defer l.leave(e)
				if pool {
					mu.Lock()
					pooled[e.Owner] = true
					mu.Unlock()
					if !l.waitFull(pairs, e.Owner) {
						t.Errorf("owner %s: no second call at once within %v", e.Owner, killWait)
					}
				}
				time.Sleep(3 * time.Millisecond)
				failing := strings.HasSuffix(e.Member, "0") || strings.HasSuffix(e.Member, "5")
				if e.Attempt != 1 && (!failing || e.Attempt != 2) {
					wrong.Store(eventKey(e), e.Attempt)
				}
				if failing && e.Attempt == 1 {
					return RetryAfter(errors.New("once"), 0)
				}
				return nil
			}
		}
		opts := []ConsumeOption{WithOwnerConcurrency(2), WithPollInterval(5 * time.Millisecond)}
		pool := append(opts[:len(opts):len(opts)], WithConcurrency(6))
		stops := []func(){
			consumeInBackground(t, s, "g", "c1", handler(true), pool...),
			consumeInBackground(t, s, "g", "c2", handler(true), pool...),
		}
		waitFor(t, "a call of every owner in the pools", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(pooled) == len(owners)
		})
		stops = append(stops, consumeInBackground(t, s, "g", "c3", handler(false), opts...))
		waitFor(t, "every event handled and acknowledged", func() bool { return drained(s) })
		for _, stop := range stops {
			stop()
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.violations != 0 {
			t.Errorf("%d calls over the cap; peaks %v", l.violations, l.peak)
		}
		if len(l.handled) != len(owners)*perOwner {
			t.Errorf("%d events handled, want %d", len(l.handled), len(owners)*perOwner)
		}
		calls := 0
		for _, n := range l.handled {
			calls += n
		}
		if want := len(owners) * (perOwner + perOwner/5); calls != want {
			t.Errorf("%d calls, want %d", calls, want)
		}
		for o, p := range l.peak {
			if p != 2 {
				t.Errorf("owner %s: peak %d calls at once, want 2", o, p)
			}
		}
		wrong.Range(func(k, v any) bool { t.Errorf("event %v: attempt %v", k, v); return true })
		if n := slotsLeft(t, s); n != 0 {
			t.Errorf("%d slot entries left", n)
		}
	})
}

// TestOwnerConcurrencyQuietOwner: while a busy owner at its cap of one has
// many events waiting, a quiet owner's event is handled: the busy owner's
// only call waits for it, so a quiet event held up behind the busy ones
// would never be handled.
func TestOwnerConcurrencyQuietOwner(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents())
		expireOwned(t, s, clk, []string{"busy"}, 200)
		expireOwned(t, s, clk, []string{"quiet"}, 1)
		quiet := make(chan struct{})
		l := newOwnerLoad(1)
		stop := consumeInBackground(t, s, "g", "c1", func(ctx context.Context, e Expiry) error {
			l.enter(e)
			defer l.leave(e)
			if e.Owner == "quiet" {
				close(quiet)
				return nil
			}
			select {
			case <-quiet:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, WithOwnerConcurrency(1), WithConcurrency(4), WithPollInterval(5*time.Millisecond))
		waitFor(t, "every event handled and acknowledged", func() bool { return drained(s) })
		stop()
		if l.violations != 0 {
			t.Errorf("%d calls over the cap", l.violations)
		}
		if n := slotsLeft(t, s); n != 0 {
			t.Errorf("%d slot entries left", n)
		}
	})
}

// TestOwnerConcurrencyCrashFreesSlots: a consumer that dies in a call holds
// its owner's only slot; once the lease TTL has passed, another consumer
// handles the owner's events: the dead call's event at attempt 2 (its first
// call counted), the others at attempt 1.
func TestOwnerConcurrencyCrashFreesSlots(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		expireOwned(t, s, clk, []string{"o"}, 3)
		opts := []ConsumeOption{WithOwnerConcurrency(1), WithLeaseTTL(300 * time.Millisecond), WithPollInterval(5 * time.Millisecond)}
		dead := crashInHandler(t, b.client(t), s, "g", "doomed", opts...)
		l := newOwnerLoad(1)
		var mu sync.Mutex
		attempts := map[string]int{}
		stop := consumeInBackground(t, s, "g", "c1", func(_ context.Context, e Expiry) error {
			l.enter(e)
			defer l.leave(e)
			mu.Lock()
			attempts[e.Member] = e.Attempt
			mu.Unlock()
			return nil
		}, opts...)
		waitFor(t, "every event handled and acknowledged", func() bool { return drained(s) })
		stop()
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 3 {
			t.Fatalf("handled %v, want 3 events", attempts)
		}
		for m, a := range attempts {
			want := 1
			if m == dead.Member {
				want = 2
			}
			if a != want {
				t.Errorf("%s: attempt %d, want %d", m, a, want)
			}
		}
		if l.violations != 0 {
			t.Errorf("%d calls over the cap", l.violations)
		}
	})
}

// TestOwnerConcurrencyOption: WithOwnerConcurrency refuses negatives and
// more than 1<<20, naming the option; 0 is no cap.
func TestOwnerConcurrencyOption(t *testing.T) {
	for _, n := range []int{-1, maxOwnerConcurrency + 1} {
		var c consumeConfig
		err := WithOwnerConcurrency(n).applyConsume(&c)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "WithOwnerConcurrency("+strconv.Itoa(n)+")") {
			t.Errorf("WithOwnerConcurrency(%d): %v", n, err)
		}
	}
	for _, n := range []int{0, 1, maxOwnerConcurrency} {
		var c consumeConfig
		if err := WithOwnerConcurrency(n).applyConsume(&c); err != nil || c.ownerCap != n {
			t.Errorf("WithOwnerConcurrency(%d): %v, %d", n, err, c.ownerCap)
		}
	}
}

// TestOwnerConcurrencyReadsPastCappedOwner: a quiet owner's event lies
// behind 1,200 of a busy owner whose one slot (cap 1) a blocked call holds.
// The reader reads past the busy events, setting them aside, in script
// calls of up to 1,000 entries, so the quiet event is handled while the
// busy call still blocks, after a few script calls that read or begin
// events (a reader bound by its free call slots would need one or two per
// busy event; the events set aside are tried again every 20 ms, a begin
// call each time).
func TestOwnerConcurrencyReadsPastCappedOwner(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		var takes, handled atomic.Int64
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithHooks(Hooks{
			OnCall: func(_ context.Context, ci CallInfo) {
				if ci.Op == "take" || ci.Op == "begin" {
					takes.Add(1)
				}
			},
		}))
		expireOwned(t, s, clk, []string{"busy"}, 1200)
		expireOwned(t, s, clk, []string{"quiet"}, 1)
		quiet := make(chan struct{})
		var before int64
		stop := consumeInBackground(t, s, "g", "c1", func(ctx context.Context, e Expiry) error {
			if e.Owner == "quiet" {
				before = takes.Load()
				close(quiet)
				return nil
			}
			select {
			case <-quiet:
				handled.Add(1)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, WithOwnerConcurrency(1), WithConcurrency(2))
		select {
		case <-quiet:
		case <-time.After(30 * time.Second):
			t.Fatal("the quiet owner's event was not handled while the busy owner's call blocked")
		}
		// 2 take calls read the 1,201 entries.
		if before > 120 {
			t.Errorf("%d take and begin calls before the quiet event's call: the reader did not read past the capped owner", before)
		}
		t.Logf("%d take and begin calls before the quiet event's call", before)
		stop() // releases the busy events set aside and frees the slot
		p := must[*redis.XPending](t)(s.rdb.XPending(context.Background(), s.shards[0].Events, "g").Result())
		if want := 1200 - handled.Load(); p.Count != want {
			t.Errorf("%d events pending after the stop, want %d: the busy ones not handled", p.Count, want)
		}
		if n := slotsLeft(t, s); n != 0 {
			t.Errorf("%d slot entries left", n)
		}
	})
}

// TestOwnerConcurrencyReadsPastOwnersAtTheirCap: an owner at its cap holds
// up no other owner's events. Three call slots, cap 1, reads of 2: the busy
// owner's first event is begun, its next 29 set aside as the reads grow
// past them, and two of x, y and z fill the other slots.
func TestOwnerConcurrencyReadsPastOwnersAtTheirCap(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		expireOwned(t, s, clk, []string{"busy"}, 30)
		expireOwned(t, s, clk, []string{"x", "y", "z"}, 1)
		release := make(chan struct{})
		var mu sync.Mutex
		running := map[string]int{}
		stop := consumeInBackground(t, s, "g", "c1", func(ctx context.Context, e Expiry) error {
			mu.Lock()
			running[e.Owner]++
			mu.Unlock()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, WithOwnerConcurrency(1), WithConcurrency(3), WithReadBatch(2))
		waitFor(t, "three calls running", func() bool {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, c := range running {
				n += c
			}
			return n == 3
		})
		mu.Lock()
		if running["busy"] != 1 {
			t.Errorf("busy owner's calls: %d, want 1", running["busy"])
		}
		mu.Unlock()
		close(release)
		waitFor(t, "every event handled and acknowledged", func() bool { return drained(s) })
		stop()
		if n := slotsLeft(t, s); n != 0 {
			t.Errorf("%d slot entries left", n)
		}
	})
}

// TestOwnerSlotFreedWakesConsumers: a script that frees an owner slot (here
// the acknowledgement of a capped call) publishes on the shard's event
// wake-up channel, and a Consume's wake-ups take it for a freed slot, not
// for new events.
func TestOwnerSlotFreedWakesConsumers(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents())
		w := s.listen("subscribe", func(k *shardKeys) string { return k.EvWake })
		defer w.close()
		for _, p := range w.subs {
			<-p.ready // each says, before, that a wake-up may have been lost
		}
		w.freed.Store(false)
		w.take()
		expireOwned(t, s, clk, []string{"a"}, 1)
		waitFor(t, "the sweep's wake-up", func() bool { return len(w.take()) > 0 })
		if w.freed.Load() {
			t.Fatal("new events were taken for a freed slot")
		}
		handled := make(chan struct{})
		stop := consumeInBackground(t, s, "g", "c1", func(context.Context, Expiry) error {
			close(handled)
			return nil
		}, WithOwnerConcurrency(1))
		<-handled
		waitFor(t, "the freed slot's wake-up", func() bool { return w.freed.Load() })
		stop()
	})
}

// TestOwnerUniqueDeliveries: a round's deliveries keep no event set aside
// (a claim took it again after a lease TTL unbegun) and no event twice, so
// that no event is begun twice at once.
func TestOwnerUniqueDeliveries(t *testing.T) {
	c := &consumer{cfg: consumeConfig{ownerCap: 1}}
	if !c.park(delivery{shard: 0, id: "1-0"}, "a", false) {
		t.Fatal("park refused")
	}
	c.ahead = []delivery{{shard: 2, id: "1-0"}}
	got := c.unique([]delivery{{shard: 1, id: "1-0"}, {shard: 0, id: "1-0"}, {shard: 0, id: "2-0"}, {shard: 1, id: "1-0"}, {shard: 2, id: "1-0"}}, 0)
	var keys []string
	for _, d := range got {
		keys = append(keys, parkKey(d))
	}
	if want := []string{"1 1-0", "0 2-0"}; strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("unique kept %v, want %v", keys, want)
	}
}
