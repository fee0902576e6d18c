package expset

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
)

// callSpan is one handler call of an owner, from its start to its end
// (Unix ns), as a handler recorded it.
type callSpan struct {
	owner      string
	start, end int64
}

// spansOf returns the calls h printed (call and ok lines, see helperPool);
// a call that had not ended when the process died ends at died.
func spansOf(h *helper, died int64) []callSpan {
	open := map[string]callSpan{}
	var out []callSpan
	for _, l := range h.calls("call", "ok") {
		f := strings.Fields(l) // call|ok shard ID attempt owner ns
		if len(f) != 6 {
			continue
		}
		ns, _ := strconv.ParseInt(f[5], 10, 64)
		k := f[1] + "/" + f[2] + "/" + f[3]
		if f[0] == "call" {
			open[k] = callSpan{owner: f[4], start: ns}
			continue
		}
		sp := open[k]
		delete(open, k)
		sp.end = ns
		out = append(out, sp)
	}
	for _, sp := range open {
		sp.end = died
		out = append(out, sp)
	}
	return out
}

// peakCalls returns, per owner, the most calls of spans under way at once.
func peakCalls(spans []callSpan) map[string]int {
	type edge struct {
		at    int64
		delta int
	}
	by := map[string][]edge{}
	for _, sp := range spans {
		by[sp.owner] = append(by[sp.owner], edge{sp.start, 1}, edge{sp.end, -1})
	}
	peak := map[string]int{}
	for o, es := range by {
		slices.SortFunc(es, func(a, b edge) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return a.delta - b.delta // an end before a start at the same instant
		})
		n := 0
		for _, e := range es {
			n += e.delta
			peak[o] = max(peak[o], n)
		}
	}
	return peak
}

// TestOwnerCapAcrossProcesses: three consumer processes of a group (two
// helpers and this one), each WithConcurrency(8) and WithOwnerConcurrency(2),
// share the events of 8 owners. One helper is stopped with SIGTERM midway
// (it finishes its calls and returns) and the other SIGKILLed with calls
// under way (when the events last that long). The handlers' own records of
// their calls (a killed process's open calls end at the kill) never show
// more than 2 calls of an owner at once over the three processes, and
// every event is handled.
func TestOwnerCapAcrossProcesses(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const owners, per, ownerCap = 8, 100, 2
		const vis = time.Second
		ctx := context.Background()
		s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		seedExpired(t, s, owners, per)
		time.Sleep(2 * time.Millisecond)
		if _, err := newSweeper(t, s).SweepOnce(ctx); err != nil {
			t.Fatal(err)
		}
		env := append(b.env(s), helperVis+"="+vis.String(), helperOwnerCap+"="+strconv.Itoa(ownerCap))
		termed := startHelper(t, "pool", env...)
		killed := startHelper(t, "pool", env...)
		// This process joins once both helpers are handling events.
		termed.waitLine("calls of the helper to stop", func(string) bool { return len(termed.calls("ok")) >= 5 })
		killed.waitLine("calls of the helper to kill", func(string) bool { return len(killed.calls("ok")) >= 5 })
		var mu sync.Mutex
		var here []callSpan
		handled := map[string]bool{}
		stop := consumeInBackground(t, s, "g", "here", func(_ context.Context, e Expiry) error {
			start := time.Now().UnixNano()
			time.Sleep(time.Duration(10+e.Shard*15) * time.Millisecond)
			mu.Lock()
			here = append(here, callSpan{e.Owner, start, time.Now().UnixNano()})
			handled[eventKey(e)] = true
			mu.Unlock()
			return nil
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithConcurrency(poolKillConcurrency), WithOwnerConcurrency(ownerCap))
		termed.term()
		termedAt := time.Now().UnixNano()
		// Killed with calls under way, or once every event is handled
		// (the three may finish them first: then the kill cuts none).
		waitFor(t, "calls of the helper to kill under way, or every event handled", func() bool {
			return len(killed.calls("call")) > len(killed.calls("ok")) || drained(s)
		})
		killed.kill()
		killedAt := time.Now().UnixNano()
		b.waitGone(t, killed)
		waitFor(t, "every event handled", func() bool { return drained(s) })
		stop()

		mu.Lock()
		defer mu.Unlock()
		spans := append(spansOf(termed, termedAt), spansOf(killed, killedAt)...)
		for _, l := range append(termed.calls("ok"), killed.calls("ok")...) {
			f := strings.Fields(l)
			handled[f[1]+"/"+f[2]] = true
		}
		spans = append(spans, here...)
		for o, n := range peakCalls(spans) {
			if n > ownerCap {
				t.Errorf("owner %s: %d calls at once over the three processes, want at most %d", o, n, ownerCap)
			}
		}
		if len(handled) != owners*per {
			t.Errorf("%d of %d events handled", len(handled), owners*per)
		}
		if d := deadKeys(t, s); len(d) != 0 {
			t.Errorf("%d dead letters", len(d))
		}
		t.Logf("%s: %d calls recorded (%d here); the stopped helper handled %d, the killed one %d", b.name, len(spans), len(here),
			len(termed.calls("ok")), len(killed.calls("ok")))
	})
}

// TestPeakCalls: the sampler counts calls at once per owner, an end and a
// start at the same instant not overlapping.
func TestPeakCalls(t *testing.T) {
	got := peakCalls([]callSpan{{"a", 0, 10}, {"a", 5, 15}, {"a", 10, 20}, {"a", 12, 13}, {"b", 0, 1}, {"b", 1, 2}})
	if got["a"] != 3 || got["b"] != 1 {
		t.Fatalf("peaks %v, want a 3 and b 1", got)
	}
}
