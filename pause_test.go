package expset

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// pauseLoad records a handler's calls: each event's attempts, and the
// calls that began while the test held the group paused.
type pauseLoad struct {
	mu       sync.Mutex
	calls    map[string][]int // event key -> attempts
	owners   map[string]int   // owner -> calls
	paused   func(owner string) bool
	violated []string
}

func (l *pauseLoad) handle(_ context.Context, e Expiry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused != nil && l.paused(e.Owner) {
		l.violated = append(l.violated, e.Owner+"/"+e.Member)
	}
	l.calls[eventKey(e)] = append(l.calls[eventKey(e)], e.Attempt)
	l.owners[e.Owner]++
	return nil
}

func (l *pauseLoad) ownerCalls(o string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owners[o]
}

// TestPauseGroupAndOwner: while a group is paused, no handler call begins
// (the consumer asks again and again, and is refused: the begins counted
// by OnCall), and after Resume every event held back is handled, at
// attempt 1; while one owner is paused in the group, the other owners'
// events are handled and none of its own, until its Resume. Pause and
// Resume report whether they changed anything.
func TestPauseGroupAndOwner(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var begins atomic.Int64
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithHooks(Hooks{OnCall: func(_ context.Context, ci CallInfo) {
			if ci.Op == "begin" {
				begins.Add(1)
			}
		}}))
		l := &pauseLoad{calls: map[string][]int{}, owners: map[string]int{}}
		stop := consumeInBackground(t, s, "g", "c", l.handle, WithConcurrency(4), WithPollInterval(5*time.Millisecond))
		defer stop()
		add := func(owner string, n int) {
			t.Helper()
			for i := range n {
				must[time.Time](t)(s.Add(ctx, owner, owner+strconv.Itoa(i)+"-"+strconv.FormatInt(clk.Now().UnixNano(), 36), time.Second))
			}
			clk.Advance(time.Second)
		}
		add("a", 3)
		waitFor(t, "the first events handled", func() bool { return drained(s) })

		if ok, err := s.Pause(ctx, "g", ""); err != nil || !ok {
			t.Fatalf("Pause: %v %v, want true", ok, err)
		}
		if ok, err := s.Pause(ctx, "g", ""); err != nil || ok {
			t.Fatalf("Pause again: %v %v, want false", ok, err)
		}
		var groupPaused atomic.Bool
		groupPaused.Store(true)
		l.mu.Lock()
		l.paused = func(string) bool { return groupPaused.Load() }
		l.mu.Unlock()
		add("a", 5)
		add("b", 5)
		from := begins.Load()
		waitFor(t, "three refused begins", func() bool { return begins.Load() >= from+3 })
		groupPaused.Store(false)
		if ok, err := s.Resume(ctx, "g", ""); err != nil || !ok {
			t.Fatalf("Resume: %v %v, want true", ok, err)
		}
		waitFor(t, "every event held back handled", func() bool { return drained(s) })

		// One owner paused: the others go on.
		if ok, err := s.Pause(ctx, "g", "a"); err != nil || !ok {
			t.Fatalf("Pause owner a: %v %v, want true", ok, err)
		}
		var aPaused atomic.Bool
		aPaused.Store(true)
		l.mu.Lock()
		l.paused = func(o string) bool { return o == "a" && aPaused.Load() }
		l.mu.Unlock()
		before := l.ownerCalls("b")
		add("a", 4)
		add("b", 4)
		waitFor(t, "owner b's events handled", func() bool { return l.ownerCalls("b") == before+4 })
		from = begins.Load()
		waitFor(t, "three more begins", func() bool { return begins.Load() >= from+3 })
		aPaused.Store(false)
		if ok, err := s.Resume(ctx, "g", "a"); err != nil || !ok {
			t.Fatalf("Resume owner a: %v %v, want true", ok, err)
		}
		if ok, err := s.Resume(ctx, "g", "a"); err != nil || ok {
			t.Fatalf("Resume owner a again: %v %v, want false", ok, err)
		}
		waitFor(t, "owner a's events handled", func() bool { return drained(s) })

		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.violated) > 0 {
			t.Errorf("calls begun while paused: %v", l.violated)
		}
		if len(l.calls) != 21 {
			t.Errorf("%d events handled, want 21", len(l.calls))
		}
		for k, as := range l.calls {
			if len(as) != 1 || as[0] != 1 {
				t.Errorf("event %s: attempts %v, want [1]", k, as)
			}
		}
	})
}

// TestPauseReserve: a Reserve of a paused group gets nothing, charging
// nothing; after Resume it gets the event at attempt 1.
func TestPauseReserve(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		if _, err := s.Pause(ctx, "g", ""); err != nil {
			t.Fatal(err)
		}
		expire(t, s, clk, 1)
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		opts := []ReserveOption{WithPollInterval(5 * time.Millisecond), WithLeaseTTL(time.Second)}
		if r, err := s.Reserve(short, "g", "c", opts...); err == nil {
			t.Fatalf("Reserve of a paused group: %+v", r.Expiry)
		}
		if _, err := s.Resume(ctx, "g", ""); err != nil {
			t.Fatal(err)
		}
		long, cancel2 := context.WithTimeout(ctx, 30*time.Second)
		defer cancel2()
		r, err := s.Reserve(long, "g", "c", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if r.Expiry.Attempt != 1 {
			t.Errorf("attempt %d after the pause, want 1", r.Expiry.Attempt)
		}
		if err := r.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPauseRefusesBadInput: a bad group or owner is refused with
// ErrInvalidArgument, and changes nothing.
func TestPauseRefusesBadInput(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	b := backend{name: "miniredis", rdb: redis.NewClient(&redis.Options{Addr: mr.Addr()}), mr: mr}
	t.Cleanup(func() { _ = b.rdb.Close() })
	ctx := context.Background()
	s, _ := newTestSet(t, b, WithExpiryEvents())
	for _, c := range []struct{ group, owner string }{{"", ""}, {string(make([]byte, maxConsumerLen+1)), ""}, {"g", jobOwnerPrefix + "1"}, {"g", string(make([]byte, maxOwnerLen+1))}} {
		for _, f := range []func(context.Context, string, string) (bool, error){s.Pause, s.Resume} {
			if _, err := f(ctx, c.group, c.owner); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("group %q owner %q: %v, want ErrInvalidArgument", c.group, c.owner, err)
			}
		}
	}
	plain, _ := newTestSet(t, b)
	if _, err := plain.Pause(ctx, "g", ""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a set without events: %v, want ErrInvalidArgument", err)
	}
}
