package expset

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
)

// poolKillConcurrency is the WithConcurrency of the pool helper.
const poolKillConcurrency = 8

// The pool helper's WithOwnerConcurrency and WithGroupConcurrency (unset:
// none), and its consumer name (unset: "pooled").
const (
	helperOwnerCap = "EXPSET_HELPER_OWNERCAP"
	helperGroupCap = "EXPSET_HELPER_GROUPCAP"
	helperConsumer = "EXPSET_HELPER_CONSUMER"
)

// helperPool is the pool role of TestHelperProcess: Consume as consumer
// "pooled" (or helperConsumer) of group "g" WithConcurrency(8) (and the
// caps the environment gives), with a handler that prints
// "call <shard> <ID> <attempt>" as it starts, takes 10-40ms and prints "ok
// <shard> <ID> <attempt>" as it returns nil, until the process is killed.
func helperPool(s *Set, say func(string, ...any)) error {
	vis, err := time.ParseDuration(os.Getenv(helperVis))
	if err != nil {
		return err
	}
	opts := []ConsumeOption{WithLeaseTTL(vis), WithPollInterval(10 * time.Millisecond), WithConcurrency(poolKillConcurrency)}
	for env, opt := range map[string]func(int) ConsumeOption{helperOwnerCap: WithOwnerConcurrency, helperGroupCap: WithGroupConcurrency} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return err
			}
			opts = append(opts, opt(n))
		}
	}
	name := "pooled"
	if v := os.Getenv(helperConsumer); v != "" {
		name = v
	}
	// SIGTERM stops it as a service stops: Consume returns once its calls
	// have; SIGKILL kills it mid-call.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return s.Consume(ctx, "g", name, func(_ context.Context, e Expiry) error {
		// call and ok carry the owner and when the call began and ended
		// (Unix ns), for the samplers of calls at once.
		say("call %d %s %d %s %d", e.Shard, e.ID, e.Attempt, e.Owner, time.Now().UnixNano())
		time.Sleep(time.Duration(10+len(e.Owner)*e.Shard%7*5) * time.Millisecond) // 10-40ms: the calls do not end together
		say("ok %d %s %d %s %d", e.Shard, e.ID, e.Attempt, e.Owner, time.Now().UnixNano())
		return nil
	}, opts...)
}

// TestKillConsumerWithConcurrency: a consumer process WithConcurrency(8) is
// SIGKILLed with handler calls under way. Right after the kill, the
// attempts Redis counts for each event still pending are read (the calls
// begun: those the helper printed, and maybe one begun just before the
// kill and not yet printed). A consumer of the group in this process then
// finishes. Nothing is lost: every event was handled by the helper and
// acknowledged, or handled by the heir; none is dead-lettered; the heir's
// call of each event comes with attempt exactly one more than the calls
// begun before, and every call of the helper was attempt 1.
func TestKillConsumerWithConcurrency(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 200
		const vis = time.Second
		s := expiredSet(t, b, 4, n)
		h := startHelper(t, "pool", append(b.env(s), helperVis+"="+vis.String())...)
		h.waitLine("calls under way", func(string) bool {
			return len(h.calls("ok")) >= 40 && len(h.calls("call")) >= len(h.calls("ok"))+poolKillConcurrency/2
		})
		h.kill()
		b.waitGone(t, h)

		printed := map[string]int{} // event key -> calls the helper printed
		handledOK := map[string]bool{}
		for _, l := range h.calls("call", "ok") {
			f := strings.Fields(l) // kind shard ID attempt
			k := f[1] + "/" + f[2]
			if f[3] != "1" {
				t.Errorf("the helper's %s of %s at attempt %s, want 1", f[0], k, f[3])
			}
			if f[0] == "call" {
				printed[k]++
			} else {
				handledOK[k] = true
			}
		}
		cut := 0
		for k := range printed {
			if !handledOK[k] {
				cut++
			}
		}
		// The calls Redis counted for each event still pending.
		begun := attemptsBegun(t, b, s, "g")
		for k, c := range begun {
			if p := printed[k]; c != p && c != p+1 {
				t.Errorf("event %s: %d calls counted, %d printed by the helper (want equal, or one more begun just before the kill)", k, c, p)
			}
		}

		var mu sync.Mutex
		heir := map[string]int{} // event key -> attempt of the heir's call
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			mu.Lock()
			defer mu.Unlock()
			if _, dup := heir[eventKey(e)]; dup {
				t.Errorf("event %s handled twice by the heir", eventKey(e))
			}
			heir[eventKey(e)] = e.Attempt
			return nil
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithConcurrency(poolKillConcurrency))
		waitFor(t, "every event handled", func() bool { return drained(s) })
		stop()

		mu.Lock()
		defer mu.Unlock()
		if d := deadKeys(t, s); len(d) != 0 {
			t.Errorf("%d dead letters", len(d))
		}
		for k, a := range heir {
			if want := begun[k] + 1; a != want {
				t.Errorf("event %s: the heir's call at attempt %d, want %d (calls begun before: %d)", k, a, want, begun[k])
			}
		}
		all := map[string]bool{}
		for k := range heir {
			all[k] = true
		}
		for k := range handledOK {
			all[k] = true
		}
		if len(all) != n {
			t.Errorf("%d of %d events handled", len(all), n)
		}
		unprinted := 0
		for k, c := range begun {
			if c > printed[k] {
				unprinted++
			}
		}
		t.Logf("%s: the helper printed %d calls (%d ok, %d cut short by the kill; %d begun and not printed); the heir handled %d (%s)",
			b.name, len(printed), len(handledOK), cut, unprinted, len(heir), fmt.Sprint(len(begun), " with calls begun"))
	})
}
