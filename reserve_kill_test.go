package expset

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// reserveKillHeld is how many reservations the reserver helper holds at
// most at once.
const reserveKillHeld = 4

// helperReserver is the reserver role of TestHelperProcess: a loop of
// Set.Reserve as consumer "doomed" of group "g" that hands each reservation
// to a goroutine of its own, holding up to 4 at once, until the process is
// killed. Before each Reserve it notes the time; each goroutine prints
// "res <shard> <ID> <attempt> <that time, unix ns>" as it gets its
// reservation, works 10-40ms and prints "ok <shard> <ID> <attempt>" once
// Finish(nil) returned nil.
func helperReserver(s *Set, say func(string, ...any)) error {
	vis, err := time.ParseDuration(os.Getenv(helperVis))
	if err != nil {
		return err
	}
	ctx := context.Background()
	slots := make(chan struct{}, reserveKillHeld)
	for {
		slots <- struct{}{}
		called := time.Now()
		r, err := s.Reserve(ctx, "g", "doomed", WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond))
		if err != nil {
			return err
		}
		go func() {
			defer func() { <-slots }()
			e := r.Expiry
			say("res %d %s %d %d", e.Shard, e.ID, e.Attempt, called.UnixNano())
			time.Sleep(time.Duration(10+len(e.Owner)*e.Shard%7*5) * time.Millisecond) // 10-40ms
			if err := r.Finish(ctx, nil); err == nil {
				say("ok %d %s %d", e.Shard, e.ID, e.Attempt)
			}
		}()
	}
}

// pendingIn reports whether event k ("<shard>/<ID>") of s is pending in
// group.
func pendingIn(t *testing.T, b killBackend, s *Set, group, k string) bool {
	t.Helper()
	shard, id, _ := strings.Cut(k, "/")
	i, err := strconv.Atoi(shard)
	if err != nil {
		t.Fatalf("event %q", k)
	}
	p, err := b.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: s.shards[i].Events, Group: group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(p) == 1
}

// TestKillReserver: a process reserving events (Set.Reserve, up to 4
// reservations held at once, each finished by a goroutine of its own) is
// SIGKILLed while it holds reservations. Once its connections are gone,
// the attempts Redis counts for each event still pending are read. A
// Reserve loop in this process then finishes every event. Nothing is lost:
// each event was finished by the helper or by the loop; none is
// dead-lettered; every reservation of the helper was attempt 1, an event
// it held when killed was counted once and comes to the loop as attempt 2
// (each event's attempt one more than the attempts counted before), and
// not before its lease TTL has passed since the helper reserved it.
func TestKillReserver(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 100
		const vis = time.Second
		ctx := context.Background()
		s := expiredSet(t, b, 4, n)
		h := startHelper(t, "reserver", append(b.env(s), helperVis+"="+vis.String())...)
		h.waitLine("reservations held", func(string) bool {
			return len(h.calls("ok")) >= 20 && len(h.calls("res")) >= len(h.calls("ok"))+reserveKillHeld/2
		})
		h.kill()
		b.waitGone(t, h)

		reserved := map[string]time.Time{} // event key -> when the helper's Reserve that took it was called
		finished := map[string]bool{}
		for _, l := range h.calls("res", "ok") {
			f := strings.Fields(l) // kind shard ID attempt [called]
			k := f[1] + "/" + f[2]
			if f[3] != "1" {
				t.Errorf("the helper's %s of %s at attempt %s, want 1", f[0], k, f[3])
			}
			if f[0] == "ok" {
				finished[k] = true
				continue
			}
			ns, err := strconv.ParseInt(f[4], 10, 64)
			if err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			reserved[k] = time.Unix(0, ns)
		}
		begun := attemptsBegun(t, b, s, "g")
		held := 0
		for k := range reserved {
			if finished[k] {
				continue
			}
			if begun[k] == 0 && !pendingIn(t, b, s, "g", k) {
				// Its Finish went through and the kill came before the
				// helper printed so: finished, by the helper.
				finished[k] = true
				continue
			}
			held++
			if begun[k] != 1 {
				t.Errorf("event %s, held by the helper at the kill: %d attempts counted, want 1", k, begun[k])
			}
		}
		if held == 0 {
			t.Fatal("the helper held no reservation at the kill")
		}

		// The survivor: a Reserve loop, until every event is done.
		type taken struct {
			attempt int
			at      time.Time
		}
		var mu sync.Mutex
		heir := map[string]taken{}
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := s.Reserve(lctx, "g", "heir", WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond))
				if err != nil {
					return
				}
				at := time.Now()
				mu.Lock()
				if _, dup := heir[eventKey(r.Expiry)]; dup {
					t.Errorf("event %s reserved twice by the heir", eventKey(r.Expiry))
				}
				heir[eventKey(r.Expiry)] = taken{r.Expiry.Attempt, at}
				mu.Unlock()
				if err := r.Finish(ctx, nil); err != nil {
					t.Errorf("Finish: %v", err)
				}
			}
		}()
		waitFor(t, "every event finished", func() bool { return drained(s) })
		stop()
		wg.Wait()

		if d := deadKeys(t, s); len(d) != 0 {
			t.Errorf("%d dead letters", len(d))
		}
		all := map[string]bool{}
		for k := range finished {
			all[k] = true
		}
		for k, h := range heir {
			all[k] = true
			if want := begun[k] + 1; h.attempt != want {
				t.Errorf("event %s: the heir's reservation at attempt %d, want %d (attempts counted before: %d)", k, h.attempt, want, begun[k])
			}
			// The lease began at the read that took the event: in the
			// helper's Reserve that returned it, or in an earlier one that
			// read it ahead less than vis/12 before (a fresh begin keeps
			// that read's lease), plus that read's round trip, which a
			// loaded machine stretches. No heir takes it within half the
			// lease TTL of the Reserve that returned it.
			if called, ok := reserved[k]; ok && h.at.Before(called.Add(vis/2)) {
				t.Errorf("event %s: the heir reserved it %v after the helper's Reserve that took it, before half the lease TTL %v", k, h.at.Sub(called), vis)
			}
		}
		for k := range reserved {
			if !finished[k] && heir[k].attempt != 2 {
				t.Errorf("event %s, held by the helper at the kill: the heir's attempt %d, want 2", k, heir[k].attempt)
			}
		}
		if len(all) != n {
			t.Errorf("%d of %d events finished", len(all), n)
		}
		t.Logf("%s: the helper reserved %d events (%d finished, %d held at the kill; %d attempts counted in all); the heir finished %d",
			b.name, len(reserved), len(finished), held, len(begun), len(heir))
	})
}

// attemptsBegun returns the attempts Redis counts for each event of s
// still pending in group, by event key (shard/ID).
func attemptsBegun(t *testing.T, b killBackend, s *Set, group string) map[string]int {
	t.Helper()
	begun := map[string]int{}
	for i, sk := range s.shards {
		for field, v := range b.rdb.HGetAll(context.Background(), sk.Att).Val() {
			id, g, _ := strings.Cut(field, " ")
			calls, _, _ := strings.Cut(v, " ")
			c, err := strconv.Atoi(calls)
			if err != nil {
				t.Fatalf("attempts field %q = %q", field, v)
			}
			if g == group {
				begun[strconv.Itoa(i)+"/"+id] = c
			}
		}
	}
	return begun
}
