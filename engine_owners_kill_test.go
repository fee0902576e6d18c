package expset

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
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

// checkCapRun checks a run of the cross-process cap tests: the calls of
// spans never hold more than limit of an owner at once, the want events
// were all handled (handled, with the helpers' "ok" lines added) and none
// was dead-lettered.
func checkCapRun(t *testing.T, s *Set, spans []callSpan, handled map[string]bool, limit, want int, helpers ...*helper) {
	t.Helper()
	for _, h := range helpers {
		for _, l := range h.calls("ok") {
			f := strings.Fields(l)
			handled[f[1]+"/"+f[2]] = true
		}
	}
	for o, n := range peakCalls(spans) {
		if n > limit {
			t.Errorf("owner %s: %d calls at once over the three processes, want at most %d", o, n, limit)
		}
	}
	if len(handled) != want {
		t.Errorf("%d of %d events handled", len(handled), want)
	}
	if d := deadKeys(t, s); len(d) != 0 {
		t.Errorf("%d dead letters", len(d))
	}
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
		spans = append(spans, here...)
		checkCapRun(t, s, spans, handled, ownerCap, owners*per, termed, killed)
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

// TestOwnerCapAcrossFailovers: as TestOwnerCapAcrossProcesses, on a
// three-master cluster with a replica each: while three consumer processes
// (two helpers and this one) run the events of 8 owners with
// WithOwnerConcurrency(2), the masters of both shards are failed over
// (CLUSTER FAILOVER: the replica takes over once it has every write) and
// one helper is SIGKILLed between them. The handlers' own records never
// show more than 2 calls of an owner at once, and every event is handled.
// The wait for the last events is bounded by failoverDrainWait, minutes:
// when it passes, the failure lists what the set still holds (see
// leftAfterFailovers); a drain that stalls for 2s is logged the same way.
func TestOwnerCapAcrossFailovers(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	const owners, per, ownerCap = 8, 200, 2
	const vis = time.Second
	cl := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	cc := cl.Client(t, func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second })
	b := killBackend{name: "cluster", rdb: cc, addrs: cl.Addrs()}
	ctx := context.Background()
	rec := &failoverRecord{began: time.Now(), handled: map[string]bool{}, calls: map[string][]string{}}
	hooks := Hooks{OnError: func(_ context.Context, ci CallInfo, _ time.Duration) {
		rec.note(fmt.Sprintf("%s shard %d: %v", ci.Op, ci.Shard, ci.Err))
	}}
	s := must[*Set](t)(Open(ctx, cc, uniqueName(t, cc), WithShards(2), WithExpiryEvents(), WithHooks(hooks)))
	seedExpired(t, s, owners, per)
	time.Sleep(2 * time.Millisecond)
	if _, err := newSweeper(t, s).SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	for _, sk := range s.shards {
		waitReplicated(t, cc, sk.Events)
	}
	env := append(b.env(s), helperVis+"="+vis.String(), helperOwnerCap+"="+strconv.Itoa(ownerCap))
	lives := startHelper(t, "pool", env...)
	killed := startHelper(t, "pool", env...)
	lives.waitLine("calls of the helper that lives", func(string) bool { return len(lives.calls("ok")) >= 5 })
	killed.waitLine("calls of the helper to kill", func(string) bool { return len(killed.calls("ok")) >= 5 })
	var here []callSpan
	stop := consumeInBackground(t, s, "g", "here", func(ctx context.Context, e Expiry) error {
		start := time.Now().UnixNano()
		rec.call("call", e, start)
		select {
		case <-time.After(time.Duration(10+e.Shard*15) * time.Millisecond):
		case <-ctx.Done(): // the lease was lost: the call ends
		}
		end := time.Now().UnixNano()
		rec.mu.Lock()
		here = append(here, callSpan{e.Owner, start, end})
		rec.mu.Unlock()
		if ctx.Err() != nil {
			rec.call("lost", e, end)
			return ctx.Err()
		}
		rec.call("ok", e, end)
		return nil
	}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithConcurrency(poolKillConcurrency), WithOwnerConcurrency(ownerCap))
	for i, sk := range s.shards {
		promoted := cl.Failover(t, cl.MasterFor(sk.Events))
		rec.note(fmt.Sprintf("shard %d's master failed over to %s", i, promoted.Addr))
		t.Logf("shard %d's master failed over to %s", i, promoted.Addr)
		if i == 0 {
			killed.kill() // with its calls under way, if any
			rec.note("the helper to kill killed")
		}
	}
	killedAt := time.Now().UnixNano()
	b.waitGone(t, killed)
	failedOver := time.Now()
	lastProgress, lastLeft, snapshots := failedOver, "", 0
	waitForState(t, "every event handled", failoverDrainWait, func() bool {
		if time.Since(lastProgress) >= 2*time.Second {
			// Every 2s, how far the drain is; when it made no progress
			// since the last time, what is left in full (twice at most).
			lastProgress = time.Now()
			left := shardsLeft(s)
			rec.mu.Lock()
			here, calls := len(rec.handled), len(rec.calls)
			rec.mu.Unlock()
			rec.note(fmt.Sprintf("left: %s; handled here %d (%d called), by the helper that lives %d", left, here, calls, len(lives.calls("ok"))))
			if left == lastLeft && snapshots < 2 {
				snapshots++
				t.Logf("no progress in 2s; left:\n%s", leftAfterFailovers(s, cc, cl, rec, lives, killed))
			}
			lastLeft = left
		}
		return drained(s)
	}, func() string {
		return leftAfterFailovers(s, cc, cl, rec, lives, killed)
	})
	t.Logf("every event handled %v after both failovers and the kill", time.Since(failedOver).Round(time.Millisecond))
	rec.mu.Lock()
	t.Logf("steps:\n%s", strings.Join(rec.notes, "\n"))
	rec.mu.Unlock()
	stop()
	lives.term()
	b.waitGone(t, lives)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	spans := append(spansOf(lives, time.Now().UnixNano()), spansOf(killed, killedAt)...)
	handled := maps.Clone(rec.handled)
	spans = append(spans, here...)
	checkCapRun(t, s, spans, handled, ownerCap, owners*per, lives, killed)
	t.Logf("%d calls recorded (%d here); the helper that lived handled %d, the killed one %d", len(spans), len(here),
		len(lives.calls("ok")), len(killed.calls("ok")))
}

// failoverDrainWait bounds TestOwnerCapAcrossFailovers's wait for the last
// events after the failovers. They drain in seconds, also beside other
// test binaries on two cores; the bound is minutes so that passing it
// means events are stuck, not slow.
const failoverDrainWait = 4 * time.Minute

// failoverRecord is what TestOwnerCapAcrossFailovers notes in this process
// for the report of what was left: the handler's calls of each event, the
// events it handled, the consumer's errors and the steps of the test.
type failoverRecord struct {
	began   time.Time
	mu      sync.Mutex
	handled map[string]bool     // event key -> its handler returned nil here
	calls   map[string][]string // event key -> "kind attempt +ms" of each call here
	notes   []string
	skipped int // notes dropped between the first 100 and the last 100
}

func (r *failoverRecord) at(ns int64) string {
	return "+" + strconv.FormatInt((ns-r.began.UnixNano())/1e6, 10) + "ms"
}

func (r *failoverRecord) call(kind string, e Expiry, ns int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := eventKey(e)
	r.calls[k] = append(r.calls[k], fmt.Sprintf("here %s attempt %d %s", kind, e.Attempt, r.at(ns)))
	if kind == "ok" {
		r.handled[k] = true
	}
}

// note records a step of the test or an error of the consumer here: the
// first 100 and the last 100 are kept, with how many came between.
func (r *failoverRecord) note(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, r.at(time.Now().UnixNano())+" "+what)
	if len(r.notes) > 200 {
		r.skipped++
		r.notes = slices.Delete(r.notes, 100, 101)
	}
}

// shardsLeft says how many events each shard of s holds and how many of
// them are pending.
func shardsLeft(s *Set) string {
	stats, err := s.Stats(context.Background())
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, st := range stats {
		out = append(out, fmt.Sprintf("shard %d events %d pending %d", st.Shard, st.Events, st.Pending))
	}
	return strings.Join(out, ", ")
}

// waitForState polls cond every 10ms until it holds, and fails t after
// limit with what report says is left.
func waitForState(t *testing.T, what string, limit time.Duration, cond func() bool, report func() string) {
	t.Helper()
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %v waiting for %s; left:\n%s", limit, what, report())
}

// leftAfterFailovers describes what s still holds while
// TestOwnerCapAcrossFailovers waits for its last events: per shard its
// Stats, the master serving it, the group's pending entries (consumer,
// idle time, deliveries) and consumers, the entries left in the stream
// with every call the three processes recorded of each, and the owner
// slots (run, runo) and attempts (att) held; then the consumer's errors
// and the test's steps.
func leftAfterFailovers(s *Set, cc *redis.ClusterClient, cl *redistest.Cluster, rec *failoverRecord, helpers ...*helper) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b strings.Builder
	say := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	rec.mu.Lock()
	defer rec.mu.Unlock()
	records := map[string][]string{}
	for k, cs := range rec.calls {
		records[k] = slices.Clone(cs)
	}
	for i, h := range helpers {
		for _, l := range h.calls("call", "ok") {
			f := strings.Fields(l) // call|ok shard ID attempt owner ns
			if len(f) != 6 {
				continue
			}
			ns, _ := strconv.ParseInt(f[5], 10, 64)
			k := f[1] + "/" + f[2]
			records[k] = append(records[k], fmt.Sprintf("helper %d (pid %d) %s attempt %s %s", i, h.cmd.Process.Pid, f[0], f[3], rec.at(ns)))
		}
	}
	stats, err := s.Stats(ctx)
	if err != nil {
		say("Stats: %v", err)
	}
	for _, st := range stats {
		say("shard %d: events %d pending %d retrying %d dead %d leased %v stalled %v (server time %s, %s)",
			st.Shard, st.Events, st.Pending, st.Retrying, st.Dead, st.Leased, st.Stalled, st.Now.Format(time.StampMilli), rec.at(st.Now.UnixNano()))
	}
	for i, sk := range s.shards {
		if m := cl.MasterFor(sk.Events); m != nil {
			say("shard %d (slot %d) served by %s", i, redistest.KeySlot(sk.Events), m.Addr)
		}
		if gs, err := cc.XInfoGroups(ctx, sk.Events).Result(); err != nil {
			say("  XINFO GROUPS: %v", err)
		} else {
			for _, g := range gs {
				say("  group %s: last delivered %s, entries read %d, lag %d, pending %d", g.Name, g.LastDeliveredID, g.EntriesRead, g.Lag, g.Pending)
			}
		}
		if cs, err := cc.XInfoConsumers(ctx, sk.Events, "g").Result(); err != nil {
			say("  XINFO CONSUMERS: %v", err)
		} else {
			for _, c := range cs {
				say("  consumer %s: pending %d, idle %v, inactive %v", c.Name, c.Pending, c.Idle, c.Inactive)
			}
		}
		pending := map[string]redis.XPendingExt{}
		if ps, err := cc.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: sk.Events, Group: "g", Start: "-", End: "+", Count: 1000}).Result(); err != nil {
			say("  XPENDING: %v", err)
		} else {
			for _, p := range ps {
				pending[p.ID] = p
			}
		}
		// The entries left, by what happened to them: the first 10 of
		// each kind in full.
		kinds := map[string][]string{}
		var order []string
		add := func(kind, line string) {
			if _, ok := kinds[kind]; !ok {
				order = append(order, kind)
			}
			kinds[kind] = append(kinds[kind], line)
		}
		if es, err := cc.XRangeN(ctx, sk.Events, "-", "+", 1000).Result(); err != nil {
			say("  XRANGE: %v", err)
		} else {
			for _, e := range es {
				k := strconv.Itoa(i) + "/" + e.ID
				p, isPending := pending[e.ID]
				delete(pending, e.ID)
				kind, state := "not pending", "not pending"
				if isPending {
					kind = "pending for " + p.Consumer
					state = fmt.Sprintf("pending for %s, idle %v, delivered %d times", p.Consumer, p.Idle, p.RetryCount)
				}
				switch {
				case recordsShowOK(records[k]):
					kind += ", handled"
				case len(records[k]) > 0:
					kind += ", called, never handled"
				default:
					kind += ", never called"
				}
				add(kind, fmt.Sprintf("%s %v: %s; calls: %s", e.ID, e.Values, state, strings.Join(records[k], ", ")))
			}
		}
		for id, p := range pending {
			add("pending, no longer in the stream", fmt.Sprintf("%s for %s, idle %v, delivered %d times; calls: %s",
				id, p.Consumer, p.Idle, p.RetryCount, strings.Join(records[strconv.Itoa(i)+"/"+id], ", ")))
		}
		for _, kind := range order {
			say("  entries %s: %d", kind, len(kinds[kind]))
			for _, l := range kinds[kind][:min(10, len(kinds[kind]))] {
				say("    %s", l)
			}
		}
		for _, key := range []string{sk.Runo, sk.Att} {
			switch typ, _ := cc.Type(ctx, key).Result(); typ {
			case "hash":
				h, err := cc.HGetAll(ctx, key).Result()
				if len(h) > 100 {
					say("  %s: %d fields", key, len(h))
				} else {
					say("  %s: %v %v", key, h, err)
				}
			default:
				say("  %s: %s", key, typ)
			}
		}
	}
	for i, h := range helpers {
		say("helper %d's stderr (the last 2000 bytes): %s", i, lastBytes(h.stderr.String(), 2000))
	}
	say("the test's steps and the consumer's errors here:")
	for i, n := range rec.notes {
		if i == 100 && rec.skipped > 0 {
			say("  (%d more)", rec.skipped)
		}
		say("  %s", n)
	}
	return b.String()
}

// recordsShowOK reports whether one of records is of a call that returned nil.
func recordsShowOK(records []string) bool {
	for _, r := range records {
		if strings.Contains(r, " ok ") {
			return true
		}
	}
	return false
}

// lastBytes returns the last n bytes of s.
func lastBytes(s string, n int) string {
	return s[max(len(s)-n, 0):]
}
