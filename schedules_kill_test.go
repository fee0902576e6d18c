package expset

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
)

// helperTicker plays the role "ticker" of TestHelperProcess: Sweeper.Run
// (WithLeaseTTL EXPSET_HELPER_LEASE) beside a Consume of each of the
// groups "a" and "b", whose handler prints "got <group> <shard>/<event ID>
// <member> <deadline ms> <attempt> <tick> <unix ms now>" and succeeds.
func helperTicker(s *Set, say func(string, ...any)) error {
	lease, err := time.ParseDuration(os.Getenv(helperLease))
	if err != nil {
		return err
	}
	w, err := NewSweeper(s, WithLeaseTTL(lease), WithPollInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	ctx := context.Background()
	errc := make(chan error, 3)
	go func() { errc <- w.Run(ctx) }()
	for _, g := range []string{"a", "b"} {
		go func() {
			errc <- s.Consume(ctx, g, "c"+strconv.Itoa(os.Getpid()), func(_ context.Context, e Expiry) error {
				say("got %s %s %s %d %d %v %d", g, eventKey(e), e.Member, e.Deadline.UnixMilli(), e.Attempt, e.Tick, time.Now().UnixMilli())
				return nil
			}, WithLeaseTTL(lease))
		}()
	}
	return <-errc
}

// tickCall is one handler call a ticker helper printed.
type tickCall struct {
	group, event, member string
	tick                 int64 // ms
	attempt              int
	isTick               bool
	at                   int64 // ms, when the call began
}

func parseTickCall(t *testing.T, l string) (tickCall, bool) {
	f := strings.Fields(l)
	if len(f) != 8 || f[0] != "got" {
		return tickCall{}, false
	}
	tick, err1 := strconv.ParseInt(f[4], 10, 64)
	attempt, err2 := strconv.Atoi(f[5])
	at, err3 := strconv.ParseInt(f[7], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("helper line %q", l)
	}
	return tickCall{group: f[1], event: f[2], member: f[3], tick: tick, attempt: attempt, isTick: f[6] == "true", at: at}, true
}

// TestKillScheduleTicksOnce runs an @every 1s schedule for 20 s in three
// processes, each sweeping and consuming groups "a" and "b"; halfway the
// one that sweeps the schedule's shard is SIGKILLed and started again.
// Each group gets exactly one event per tick of the window, none for a
// tick twice, and the first call of each at attempt 1. How late the calls
// began is logged (bench: BenchmarkScheduleTickLatency), not asserted.
func TestKillScheduleTicksOnce(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const (
			window = 20 * time.Second
			lease  = 2 * time.Second
		)
		ctx := context.Background()
		s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(4), WithExpiryEvents(), WithConsumerGroups("a", "b")))
		start := time.Now()
		first, err := s.PutSchedule(ctx, "beat", "@every 1s")
		if err != nil {
			t.Fatal(err)
		}
		env := append(b.env(s), helperLease+"="+lease.String())
		hs := []*helper{startHelper(t, "ticker", env...), startHelper(t, "ticker", env...), startHelper(t, "ticker", env...)}

		// Halfway, the helper that sweeps the schedule's shard, found by its
		// next sweep of it, dies some 300 ms after that sweep: between two
		// ticks, its calls done.
		time.Sleep(time.Until(start.Add(window / 2)))
		swept := "swept " + strconv.Itoa(s.ShardOf("beat")) + " "
		seen := make([]int, len(hs))
		for i, h := range hs {
			h.mu.Lock()
			seen[i] = len(h.lines)
			h.mu.Unlock()
		}
		victim := -1
		for end := time.Now().Add(killWait); victim < 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("no helper swept the schedule's shard")
			}
			for i, h := range hs {
				h.mu.Lock()
				if slices.ContainsFunc(h.lines[seen[i]:], func(l string) bool { return strings.HasPrefix(l, swept) }) {
					victim = i
				}
				h.mu.Unlock()
			}
		}
		time.Sleep(300 * time.Millisecond)
		hs[victim].kill()
		t.Logf("killed helper %d at %v", victim, time.Since(start).Round(time.Millisecond))
		hs = append(hs, startHelper(t, "ticker", env...))

		time.Sleep(time.Until(start.Add(window)))
		last := time.Now().UnixMilli()
		var want []int64
		for tk := first.UnixMilli(); tk <= last; tk += 1000 {
			want = append(want, tk)
		}
		calls := func() []tickCall {
			var out []tickCall
			for _, h := range hs {
				h.mu.Lock()
				lines := slices.Clone(h.lines)
				h.mu.Unlock()
				for _, l := range lines {
					if c, ok := parseTickCall(t, l); ok {
						out = append(out, c)
					}
				}
			}
			return out
		}
		// Wait for every tick of the window in both groups.
		var all []tickCall
		for end := time.Now().Add(killWait); ; time.Sleep(10 * time.Millisecond) {
			all = calls()
			got := map[string]bool{}
			for _, c := range all {
				got[c.group+" "+strconv.FormatInt(c.tick, 10)] = true
			}
			missing := 0
			for _, g := range []string{"a", "b"} {
				for _, tk := range want {
					if !got[g+" "+strconv.FormatInt(tk, 10)] {
						missing++
					}
				}
			}
			if missing == 0 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("%d ticks of the window missing after %v", missing, killWait)
			}
		}
		if _, err := s.RemoveSchedule(ctx, "beat"); err != nil {
			t.Fatal(err)
		}
		type key struct {
			group string
			tick  int64
		}
		events := map[key]map[string]int{} // event -> lowest attempt
		var late []int64
		for _, c := range all {
			if c.member != "beat" || !c.isTick {
				t.Fatalf("call %+v: not a tick of beat", c)
			}
			if (c.tick-first.UnixMilli())%1000 != 0 || c.tick < first.UnixMilli() {
				t.Fatalf("call %+v: not a tick of the schedule", c)
			}
			k := key{c.group, c.tick}
			if events[k] == nil {
				events[k] = map[string]int{}
			}
			if a, ok := events[k][c.event]; !ok || c.attempt < a {
				events[k][c.event] = c.attempt
			}
			if c.attempt == 1 && c.tick <= last {
				late = append(late, c.at-c.tick)
			}
		}
		for k, es := range events {
			if len(es) != 1 {
				t.Errorf("group %s, tick %d: %d events %v, want one", k.group, k.tick, len(es), es)
			}
			for e, a := range es {
				if a != 1 {
					t.Errorf("group %s, tick %d, event %s: first call at attempt %d", k.group, k.tick, e, a)
				}
			}
		}
		slices.Sort(late)
		t.Logf("%d ticks in the window; calls began after their tick: median %d ms, p90 %d ms, max %d ms (the ticks swept late are the dead helper's shard's, until its lease lapsed)",
			len(want), late[len(late)/2], late[len(late)*9/10], late[len(late)-1])
	})
}
