package expset

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// groupSlotsHeld returns how many call slots of group s's group slot key
// holds (WithGroupConcurrency), or -1 on an error.
func groupSlotsHeld(s *Set, group string) int64 {
	n, err := s.rdb.ZCard(context.Background(), s.st.NewGroupSlots(group, 1, 0).Key).Result()
	if err != nil {
		return -1
	}
	return n
}

// TestGroupConcurrencyCap: three Consume calls of one group, with room for
// 12 calls between them, WithGroupConcurrency(3) and, in the second case,
// WithOwnerConcurrency(1): no more than 3 calls of the group run at once,
// nor 2 of an owner, every event is handled once (the failing ones twice,
// at attempts 1 and 2), and every slot is freed at the end.
func TestGroupConcurrencyCap(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	for _, ownerCap := range []int{0, 1} {
		name := "group"
		if ownerCap > 0 {
			name = "group,owner"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b backend) {
				const perOwner = 10
				owners := []string{"a", "b", "c", "d", "e", "f"}
				s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents())
				expireOwned(t, s, clk, owners, perOwner)
				group, byOwner := newOwnerLoad(3), newOwnerLoad(max(ownerCap, perOwner))
				var wrong sync.Map
				handle := func(_ context.Context, e Expiry) error {
					all := e
					all.Owner = "*"
					group.enter(all)
					byOwner.enter(e)
					defer group.leave(all)
					defer byOwner.leave(e)
					time.Sleep(2 * time.Millisecond)
					failing := strings.HasSuffix(e.Member, "3")
					if e.Attempt != 1 && (!failing || e.Attempt != 2) {
						wrong.Store(eventKey(e), e.Attempt)
					}
					if failing && e.Attempt == 1 {
						return RetryAfter(errors.New("once"), 0)
					}
					return nil
				}
				opts := []ConsumeOption{WithGroupConcurrency(3), WithConcurrency(4), WithPollInterval(5 * time.Millisecond)}
				if ownerCap > 0 {
					opts = append(opts, WithOwnerConcurrency(ownerCap))
				}
				var stops []func()
				for _, c := range []string{"c1", "c2", "c3"} {
					stops = append(stops, consumeInBackground(t, s, "g", c, handle, opts...))
				}
				waitFor(t, "every event handled and acknowledged", func() bool { return drained(s) })
				for _, stop := range stops {
					stop()
				}
				waitFor(t, "every group slot freed", func() bool { return groupSlotsHeld(s, "g") == 0 })
				group.mu.Lock()
				defer group.mu.Unlock()
				byOwner.mu.Lock()
				defer byOwner.mu.Unlock()
				t.Logf("group peak %d, owner peaks %v", group.peak["*"], byOwner.peak)
				if group.violations != 0 {
					t.Errorf("%d calls over the group's cap of 3; peak %d", group.violations, group.peak["*"])
				}
				if ownerCap > 0 && byOwner.violations != 0 {
					t.Errorf("%d calls over the owner cap of %d; peaks %v", byOwner.violations, ownerCap, byOwner.peak)
				}
				if len(byOwner.handled) != len(owners)*perOwner {
					t.Errorf("%d events handled, want %d", len(byOwner.handled), len(owners)*perOwner)
				}
				calls := 0
				for _, n := range byOwner.handled {
					calls += n
				}
				if want := len(owners) * (perOwner + 1); calls != want {
					t.Errorf("%d calls, want %d", calls, want)
				}
				wrong.Range(func(k, v any) bool { t.Errorf("event %v: attempt %v", k, v); return true })
			})
		})
	}
}

// TestGroupConcurrencyLapse: the group's slots, all held by a consumer
// that died (taken with a lease TTL of 300ms and never renewed), lapse,
// and a Consume WithGroupConcurrency then handles every event, each once.
func TestGroupConcurrencyLapse(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 10)
		const lease = 300 * time.Millisecond
		dead := s.st.NewGroupSlots("g", 2, lease.Milliseconds())
		if n, err := s.st.GroupTake(context.Background(), dead, []string{"dead1", "dead2"}); err != nil || n != 2 {
			t.Fatalf("the dead consumer's take: %d %v", n, err)
		}
		var mu sync.Mutex
		calls := map[string]int{}
		stop := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error {
			mu.Lock()
			defer mu.Unlock()
			calls[eventKey(e)]++
			return nil
		}, WithGroupConcurrency(2), WithConcurrency(4), WithLeaseTTL(10*lease), WithPollInterval(5*time.Millisecond))
		waitFor(t, "every event handled and acknowledged", func() bool { return drained(s) })
		stop()
		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 10 {
			t.Errorf("%d events handled, want 10", len(calls))
		}
		for k, n := range calls {
			if n != 1 {
				t.Errorf("event %s: %d calls", k, n)
			}
		}
		if n := groupSlotsHeld(s, "g"); n != 0 {
			t.Errorf("%d group slots left", n)
		}
	})
}
