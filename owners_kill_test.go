package expset

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
)

// TestKillConsumerOwnerSlots: a consumer process WithConcurrency(8) and
// WithOwnerConcurrency(2) is SIGKILLed with calls under way, holding owner
// slots. A consumer of the group in this process, with the same options,
// then finishes: nothing is lost or dead-lettered, the heir's call of each
// event comes with attempt exactly one more than the calls Redis counted
// before (an event refused at the cap was never charged), the heir never
// runs more than two calls of an owner at once, and the dead consumer's
// slots are gone once its leases have lapsed.
func TestKillConsumerOwnerSlots(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const owners, per = 10, 20
		const vis = time.Second
		ctx := context.Background()
		s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		seedExpired(t, s, owners, per)
		time.Sleep(2 * time.Millisecond)
		// (An Add removes its owner's expired members too, with their events.)
		if _, err := newSweeper(t, s).SweepOnce(ctx); err != nil {
			t.Fatal(err)
		}
		events := 0
		for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
			events += int(st.Events)
		}
		if events != owners*per {
			t.Fatalf("%d events, want %d", events, owners*per)
		}
		h := startHelper(t, "pool", append(b.env(s), helperVis+"="+vis.String(), helperOwnerCap+"=2")...)
		h.waitLine("calls under way", func(string) bool {
			return len(h.calls("ok")) >= 40 && len(h.calls("call")) >= len(h.calls("ok"))+poolKillConcurrency/2
		})
		h.kill()
		b.waitGone(t, h)
		handledOK := map[string]bool{}
		for _, l := range h.calls("ok") {
			f := strings.Fields(l) // ok shard ID attempt
			handledOK[f[1]+"/"+f[2]] = true
		}
		held := 0
		begun := map[string]int{}
		for i, sk := range s.shards {
			for _, n := range b.rdb.HVals(ctx, sk.Runo).Val() {
				c, _ := strconv.Atoi(n) // the first slot ("1"), or how many more
				held += c
			}
			for field, v := range b.rdb.HGetAll(ctx, sk.Att).Val() {
				id, _, _ := strings.Cut(field, " ")
				calls, _, _ := strings.Cut(v, " ")
				c, _ := strconv.Atoi(calls)
				begun[strconv.Itoa(i)+"/"+id] = c
			}
		}
		if held == 0 {
			t.Fatalf("no owner slot held at the kill")
		}
		l := newOwnerLoad(2)
		var mu sync.Mutex
		heir := map[string]int{}
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			l.enter(e)
			defer l.leave(e)
			mu.Lock()
			heir[eventKey(e)] = e.Attempt
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			return nil
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithConcurrency(poolKillConcurrency), WithOwnerConcurrency(2))
		waitFor(t, "every event handled", func() bool { return drained(s) })
		stop()
		mu.Lock()
		defer mu.Unlock()
		if d := deadKeys(t, s); len(d) != 0 {
			t.Errorf("%d dead letters", len(d))
		}
		for k, a := range heir {
			if want := begun[k] + 1; a != want {
				t.Errorf("event %s: the heir's call at attempt %d, want %d", k, a, want)
			}
		}
		all := map[string]bool{}
		for k := range heir {
			all[k] = true
		}
		for k := range handledOK {
			all[k] = true
		}
		if len(all) != owners*per {
			t.Errorf("%d of %d events handled", len(all), owners*per)
		}
		if l.violations != 0 {
			t.Errorf("%d calls of the heir over the cap", l.violations)
		}
		if n := slotsLeft(t, s); n != 0 {
			t.Errorf("%d slot entries left", n)
		}
		t.Logf("%s: %d slots held at the kill; the helper handled %d, the heir %d", b.name, held, len(handledOK), len(heir))
	})
}
