package expset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A system test of the background loops: a redis-server with AOF
// (appendfsync always) is SIGKILLed and restarted on the same port while
// the loops run and members keep expiring.

// restartRun is one run of restartUnderLoad: a dedicated server, a set on
// it whose loop errors are recorded, and what the writer was told.
type restartRun struct {
	srv *redistest.Server
	rdb *redis.Client
	set *Set

	mu     sync.Mutex
	errs   []errorReport   // every error a loop reported (Hooks.OnError)
	acked  map[string]bool // owner/member of every Add that returned nil
	unsure map[string]bool // owner/member of every Add that failed: it may have landed

	// beforeKill and beforeStop, when set, run in load just before the
	// SIGKILL and just before the loops are stopped.
	beforeKill, beforeStop func()
}

// newRestartRun starts a redis-server with AOF and opens a set of 4 shards
// with expiry events on it, recording what its loops report.
func newRestartRun(t *testing.T) *restartRun {
	t.Helper()
	if testing.Short() {
		t.Skip("kills and restarts a redis-server; skipped with -short")
	}
	r := &restartRun{acked: map[string]bool{}, unsure: map[string]bool{}}
	r.srv = redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	// No go-redis retries: each call fails at once while the server is
	// down, so the loops meet the outage many times over (with retries a
	// call can spend most of it dialling).
	r.rdb = r.srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	r.set = must[*Set](t)(Open(context.Background(), r.rdb, uniqueName(t, r.rdb), WithShards(4), WithExpiryEvents(),
		WithHooks(Hooks{OnError: func(_ context.Context, ci CallInfo, retry time.Duration) {
			e := errorReport{ci, retry}
			r.mu.Lock()
			r.errs = append(r.errs, e)
			r.mu.Unlock()
		}})))
	return r
}

// reported returns the errors the loops reported so far.
func (r *restartRun) reported() []errorReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]errorReport(nil), r.errs...)
}

// load runs loops (Sweeper.Run, Set.Consume, ...) in the background while a
// writer adds members expiring 30ms later: for a while, then across a
// SIGKILL of the server, 2s down (longer than go-redis retries a
// command) and a restart, then for a while again.
// It returns once every acknowledged member is no longer due (swept), and
// every loop has run past the restart, and stops the loops, checking each
// returned nil.
func (r *restartRun) load(t *testing.T, loops ...func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	var stops []func()
	for i, run := range loops {
		stops = append(stops, background(t, "loop "+strconv.Itoa(i), run))
	}
	writeCtx, stopWriting := context.WithCancel(ctx)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for i := 0; writeCtx.Err() == nil; i++ {
			owner, member := "o"+strconv.Itoa(i%50), "m"+strconv.Itoa(i)
			_, err := r.set.Add(writeCtx, owner, member, 30*time.Millisecond)
			r.mu.Lock()
			if err == nil {
				r.acked[owner+"/"+member] = true
			} else {
				r.unsure[owner+"/"+member] = true
			}
			r.mu.Unlock()
			if err != nil {
				time.Sleep(10 * time.Millisecond) // the server is down
			} else {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	// Enough acknowledged writes on each side of the outage, however slow
	// the machine: checkExactlyOnce wants 100 in all.
	ackedPast := func(n int) func() error {
		return func() error {
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.acked) < n {
				return fmt.Errorf("%d acknowledged writes, want %d", len(r.acked), n)
			}
			return nil
		}
	}
	waitHealed(t, "writes before the kill", faultWait, ackedPast(60))
	if r.beforeKill != nil {
		r.beforeKill()
	}
	r.srv.Kill()
	time.Sleep(2 * time.Second)
	if err := r.srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	waitHealed(t, "the client reconnects after the restart", faultWait, func() error { return r.rdb.Ping(ctx).Err() })
	r.mu.Lock()
	before := len(r.acked)
	r.mu.Unlock()
	waitHealed(t, "writes after the restart", faultWait, ackedPast(before+60))
	stopWriting()
	<-written
	waitHealed(t, "every member swept", faultWait, func() error {
		stats, err := r.set.Stats(ctx)
		if err != nil {
			return err
		}
		for _, st := range stats {
			if st.Owners != 0 {
				return errors.New("shard " + strconv.Itoa(st.Shard) + " still indexes owners")
			}
		}
		return nil
	})
	if r.beforeStop != nil {
		r.beforeStop()
	}
	for _, stop := range stops {
		stop()
	}
}

// leases returns the tokens of the live sweeper leases, sorted.
func (r *restartRun) leases() []string {
	reg, err := r.set.sweepers(context.Background(), "", -1)
	if err != nil {
		return nil
	}
	return reg.Tokens
}

// streamEvents counts the events in the set's streams by owner/member.
func (r *restartRun) streamEvents(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, sk := range r.set.shards {
		for _, m := range must[[]redis.XMessage](t)(r.rdb.XRange(context.Background(), sk.Events, "-", "+").Result()) {
			o, _ := m.Values["o"].(string)
			mem, _ := m.Values["m"].(string)
			out[o+"/"+mem]++
		}
	}
	return out
}

// checkExactlyOnce fails t unless seen (events by owner/member) holds every
// acknowledged Add exactly once, every failed Add at most once, and nothing
// else.
func (r *restartRun) checkExactlyOnce(t *testing.T, seen map[string]int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.acked) < 100 {
		t.Fatalf("only %d acknowledged writes: the run proves little", len(r.acked))
	}
	for k := range r.acked {
		if seen[k] != 1 {
			t.Errorf("acknowledged %s: %d events, want 1", k, seen[k])
		}
	}
	for k, n := range seen {
		if !r.acked[k] && (!r.unsure[k] || n > 1) {
			t.Errorf("%s: %d events, acknowledged %v, failed %v", k, n, r.acked[k], r.unsure[k])
		}
	}
	t.Logf("%d acknowledged, %d failed writes; %d events", len(r.acked), len(r.unsure), len(seen))
}

// TestSweeperRunSurvivesRestart: Sweeper.Run keeps going across a SIGKILL
// and restart of redis-server (AOF, appendfsync always): it does not return,
// the errors of the outage reach Hooks.OnError, and every acknowledged
// member gets its expiry event exactly once (none lost, none doubled). The
// lease (6s, longer than the outage, renewed every 2s, so renewals fail
// during it) is the same token's when Redis answers again.
func TestSweeperRunSurvivesRestart(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	r := newRestartRun(t)
	w := newSweeper(t, r.set, WithPollInterval(10*time.Millisecond), WithLeaseTTL(6*time.Second))
	var held []string
	r.beforeKill = func() {
		waitFor(t, "the lease held", func() bool { return len(r.leases()) == 1 })
		held = r.leases()
	}
	r.beforeStop = func() {
		waitFor(t, "the lease held again", func() bool { return len(r.leases()) == 1 })
		if got := r.leases(); !slices.Equal(got, held) {
			t.Errorf("leases after the restart %q, want the same tokens as before %q", got, held)
		}
	}
	r.load(t, w.Run)
	r.checkExactlyOnce(t, r.streamEvents(t))
	errs := r.reported()
	if len(errs) == 0 {
		t.Fatal("no error reported across the outage")
	}
	for _, e := range errs {
		if e.Set != r.set.Name() || !wakeOrOp(e, "sweep", "lease") || e.Err == nil || e.Retry <= 0 {
			t.Errorf("report %+v", e)
		}
	}
	t.Logf("%d errors reported, first %v", len(errs), errs[0].Err)
}

// TestConsumeSurvivesRestart: Set.Consume and Sweeper.Run keep going across
// a SIGKILL and restart of redis-server (AOF, appendfsync always): neither
// returns, Consume's errors of the outage reach Hooks.OnError, and every
// acknowledged member's event is handled (at least once: a handler call
// whose acknowledgement the outage cut off is made again), none dead-lettered,
// the streams end empty. The same with WithGroupConcurrency, whose slots
// held across the outage lapse or are freed.
func TestConsumeSurvivesRestart(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	t.Run("plain", func(t *testing.T) { consumeSurvivesRestart(t) })
	t.Run("group-capped", func(t *testing.T) { consumeSurvivesRestart(t, WithGroupConcurrency(2), WithConcurrency(4)) })
}

func consumeSurvivesRestart(t *testing.T, extra ...ConsumeOption) {
	r := newRestartRun(t)
	var mu sync.Mutex
	handled := map[string]int{}
	handle := func(_ context.Context, e Expiry) error {
		mu.Lock()
		handled[e.Owner+"/"+e.Member]++
		mu.Unlock()
		return nil
	}
	// The sweeper is the test's own (w): Consume runs none, so that its
	// hooks see only Consume's errors.
	opts := append([]ConsumeOption{WithLeaseTTL(300 * time.Millisecond), WithPollInterval(5 * time.Millisecond), WithoutSweeper()}, extra...)
	w := newSweeper(t, r.set, WithPollInterval(10*time.Millisecond), WithLeaseTTL(2*time.Second))
	// Consume on a client of its own that does not retry commands, so that
	// go-redis's retries cannot ride out the outage unseen.
	rdb := r.srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	var consumeErrs []errorReport
	cs := must[*Set](t)(Open(context.Background(), rdb, r.set.Name(), WithShards(4), WithExpiryEvents(), WithHooks(Hooks{OnError: func(_ context.Context, ci CallInfo, retry time.Duration) {
		e := errorReport{ci, retry}
		mu.Lock()
		consumeErrs = append(consumeErrs, e)
		mu.Unlock()
	}})))
	r.load(t, w.Run, func(ctx context.Context) error { return cs.Consume(ctx, "g", "c", handle, opts...) })
	consumeUntil(t, r.set, "c", handle, func() bool { return shardsIdle(r.set, 0) }, opts...)

	mu.Lock()
	seen := map[string]int{}
	again := 0
	for k, n := range handled {
		seen[k] = 1
		again += n - 1
	}
	mu.Unlock()
	r.checkExactlyOnce(t, seen)
	mu.Lock()
	defer mu.Unlock()
	for _, e := range consumeErrs {
		groupSlots := len(extra) > 0 && e.Op == "consume" && e.Shard == -1 // the group's key spans the shards
		if !(wakeOrOp(e, "consume") || groupSlots) || e.Set != r.set.Name() || e.Err == nil || e.Retry <= 0 {
			t.Errorf("report %+v", e)
		}
	}
	if len(consumeErrs) == 0 {
		t.Fatal("Consume reported no error across the outage")
	}
	t.Logf("%d events handled, %d again; Consume reported %d errors, first %v", len(seen), again, len(consumeErrs), consumeErrs[0].Err)
}

// wakeOrOp reports whether e is an error of one of ops on a shard 0 to 3, or
// of the wake-ups' subscription (of one shard, or of all: -1), or of the
// sweeper's lease (-1).
func wakeOrOp(e errorReport, ops ...string) bool {
	lo := 0
	if e.Op == "subscribe" || e.Op == "lease" { // a subscription for all shards; the sweeper's one lease
		lo = -1
	}
	return (e.Op == "subscribe" || slices.Contains(ops, e.Op)) && e.Shard >= lo && e.Shard <= 3
}
