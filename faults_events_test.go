package expset

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Fault tests of the sweeper and the expiry events, with the helpers of
// faults_test.go.

// consumeUntil runs Consume in the test's goroutine (so its handler may
// call t.Fatal) until done reports true, checked every 10ms from another
// goroutine, or faultWait passes.
func consumeUntil(t *testing.T, s *Set, name string, handle func(context.Context, Expiry) error, done func() bool, opts ...ConsumeOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for ctx.Err() == nil && !done() {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	if err := s.Consume(ctx, "g", name, handle, opts...); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	<-finished
	if !done() {
		t.Fatalf("Consume as %s: not done after %v", name, faultWait)
	}
}

// shardsIdle reports whether every shard's stream is empty, with nothing
// pending; dead is the number of dead letters wanted.
func shardsIdle(s *Set, dead int64) bool {
	stats, err := s.Stats(context.Background())
	if err != nil {
		return false
	}
	var n int64
	for _, st := range stats {
		if st.Events != 0 || st.Pending != 0 {
			return false
		}
		n += st.Dead
	}
	return n == dead
}

// TestEventsScriptCacheFlushed: the sweep, begin, claim, ack, bury, kick,
// release and prune scripts fall back to EVAL after the script cache is
// lost, like the others (TestScriptCacheFlushed): the cache is flushed
// before the sweep, and by the handler before every ack (pipelined with the
// next begin), lease renewal, failure, claim, bury and shutdown, and before
// the kick. Every event is handled, the one that always fails is buried,
// and kicked back it is handled; the events released on a shutdown come
// back at attempt 1, and the last consumer leaves the group.
func TestEventsScriptCacheFlushed(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		ctx := context.Background()
		for i := 0; i < 4; i++ {
			must[time.Time](t)(s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Second, WithPayload([]byte("p"+strconv.Itoa(i)))))
		}
		clk.Advance(time.Second)
		flushScripts(t, b.rdb)
		if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != 4 {
			t.Fatalf("sweep after a flush: %+v, %v", st, err)
		}
		var rec recorder
		consumeUntil(t, s, "c1", func(_ context.Context, e Expiry) error {
			flushScripts(t, b.rdb)
			rec.add(e)
			if e.Owner == "o0" {
				return errors.New("always fails")
			}
			return nil
		}, func() bool { return shardsIdle(s, 1) }, append(fastConsume, WithMaxAttempts(2))...)
		dead := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0))
		if len(dead) != 1 || dead[0].Event.Owner != "o0" || dead[0].Event.Attempt != 2 || rec.len() != 5 {
			t.Fatalf("dead letters %+v after %d deliveries: want o0's, after 2 attempts, and 5 deliveries", dead, rec.len())
		}
		flushScripts(t, b.rdb)
		if n, err := s.Kick(ctx, dead...); err != nil || n != 1 {
			t.Fatalf("Kick after a flush: %d, %v", n, err)
		}
		var kicked recorder
		consumeUntil(t, s, "c2", func(_ context.Context, e Expiry) error {
			flushScripts(t, b.rdb)
			kicked.add(e)
			return nil
		}, func() bool { return shardsIdle(s, 0) }, fastConsume...)
		if got := kicked.events(); len(got) != 1 || got[0].Owner != "o0" || string(got[0].Payload) != "p0" || got[0].Attempt != 1 {
			t.Fatalf("kicked event delivered as %+v", got)
		}

		// A shutdown mid-batch releases the rest and leaves the group, and
		// a long handler call renews its lease, each right after a flush.
		for i := 4; i < 8; i++ {
			must[time.Time](t)(s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Second))
		}
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		slow := []ConsumeOption{WithLeaseTTL(90 * time.Millisecond), WithPollInterval(5 * time.Millisecond), WithReadBatch(4)}
		cctx, stop := context.WithCancel(ctx)
		var last recorder
		_ = s.Consume(cctx, "g", "c3", func(_ context.Context, e Expiry) error {
			flushScripts(t, b.rdb)
			stop()
			last.add(e)
			return nil
		}, slow...)
		consumeUntil(t, s, "c4", func(_ context.Context, e Expiry) error {
			flushScripts(t, b.rdb)
			time.Sleep(100 * time.Millisecond) // renewals every 30ms
			last.add(e)
			return nil
		}, func() bool { return shardsIdle(s, 0) }, slow...)
		for _, e := range last.events() {
			if e.Attempt != 1 {
				t.Errorf("after the shutdown: %+v, want attempt 1", e)
			}
		}
		if last.len() != 4 {
			t.Fatalf("%d handler calls for 4 events", last.len())
		}
		// c4 left as it stopped; c3, which still held what it released
		// then, is left to a later consumer's prune.
		if cs := consumers(t, b.rdb, s, "g"); slices.ContainsFunc(cs, func(c string) bool { return strings.HasSuffix(c, "/c4") }) {
			t.Fatalf("consumers left: %v", cs)
		}
	})
}

// TestEventsSurviveRestartWithAOF: on a server with `appendonly yes` and
// `appendfsync always`, a crash (SIGKILL) loses no event, no pending
// delivery and no expired member not yet swept: afterwards the event in
// the crashed consumer's handler comes again with Attempt 2, the others
// with Attempt 1 (no handler call used them), the members
// unswept at the crash are swept with their events, and every event is
// handled once acknowledged, with its payload.
func TestEventsSurviveRestartWithAOF(t *testing.T) {
	redistest.SystemTest(t)
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := srv.Client(t)
	ctx := context.Background()
	s := must[*Set](t)(Open(context.Background(), rdb, uniqueName(t, rdb), WithShards(2), WithExpiryEvents(), WithPayloadStorage()))
	add := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			must[time.Time](t)(s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Millisecond, WithPayload([]byte("p"+strconv.Itoa(i)))))
		}
		time.Sleep(2 * time.Millisecond)
	}
	add(0, 4)
	if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != 4 {
		t.Fatalf("sweep: %+v, %v", st, err)
	}
	add(4, 6) // expired, not swept at the crash
	// A consumer that dies in its handler: its reads stay pending.
	crashed := crashInHandler(t, srv.Client(t), s, "g", "doomed", fastConsume...)
	var pending, events, due int64
	for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
		pending, events, due = pending+st.Pending, events+st.Events, due+st.MembersDue
	}
	// The consumer reads no more than it has call slots for: one.
	if pending != 1 || events != 4 || due != 2 {
		t.Fatalf("before the crash: %d pending, %d events, %d members due; want 1, 4, 2", pending, events, due)
	}

	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	waitHealed(t, "the client reconnects after the restart", faultWait, func() error { return rdb.Ping(ctx).Err() })
	pending, events, due = 0, 0, 0
	for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
		pending, events, due = pending+st.Pending, events+st.Events, due+st.MembersDue
	}
	if pending != 1 || events != 4 || due != 2 {
		t.Fatalf("after the crash: %d pending, %d events, %d members due; want 1, 4, 2", pending, events, due)
	}
	if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != 2 {
		t.Fatalf("sweep after the restart: %+v, %v", st, err)
	}
	var rec recorder
	consumeUntil(t, s, "heir", func(_ context.Context, e Expiry) error {
		rec.add(e)
		return nil
	}, func() bool { return shardsIdle(s, 0) }, fastConsume...)
	seen := map[string]int{}
	for _, e := range rec.events() {
		seen[e.Owner]++
		if want := 1 + btoi(e.Owner == crashed.Owner); e.Attempt != want || string(e.Payload) != "p"+e.Owner[1:] {
			t.Errorf("event %+v: want attempt %d (the crash cut short the handler call of %s)", e, want, crashed.Owner)
		}
	}
	if len(seen) != 6 || rec.len() != 6 {
		t.Fatalf("handled %v in %d deliveries, want o0..o5 once each", seen, rec.len())
	}
}

// TestEventsSurviveFailover: a master of a Redis Cluster dies (SIGKILL) and
// its replica takes over. Every event and every expired member the replica
// had received (made sure with WAIT, see waitReplicated) is there: the
// members are swept on the new master and every event is handled once. As
// for admissions (TestFailoverKeepsQuota), what the master acknowledged and
// had not replicated is lost with it: members and their events together, or
// an acknowledgement, which makes a redelivery.
func TestEventsSurviveFailover(t *testing.T) {
	redistest.SystemTest(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	cc := cl.Client(t, func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second })
	ctx := context.Background()
	s := must[*Set](t)(Open(context.Background(), cc, uniqueName(t, cc), WithShards(3), WithExpiryEvents(), WithPayloadStorage()))
	const n = 12
	for i := 0; i < n; i++ {
		must[time.Time](t)(s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Millisecond, WithPayload([]byte("p"+strconv.Itoa(i)))))
		if i == n/2-1 {
			time.Sleep(2 * time.Millisecond)
			if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n/2 {
				t.Fatalf("sweep: %+v, %v", st, err)
			}
		}
	}
	time.Sleep(2 * time.Millisecond) // the rest expired, not swept
	for _, sk := range s.shards {
		waitReplicated(t, cc, sk.Events)
	}
	master := cl.MasterFor(s.shards[0].Events)
	promoted := cl.KillMaster(t, master)
	t.Logf("killed master %s; replica %s serves shard 0 now", master.Addr, promoted.Addr)
	waitHealed(t, "the cluster client follows the failover", faultWait, func() error {
		_, err := s.Stats(ctx)
		return err
	})
	if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n-n/2 {
		t.Fatalf("sweep after the failover: %+v, %v; want %d expired", st, err, n-n/2)
	}
	var rec recorder
	consumeUntil(t, s, "c", func(_ context.Context, e Expiry) error {
		rec.add(e)
		return nil
	}, func() bool { return shardsIdle(s, 0) }, fastConsume...)
	seen := map[string]bool{}
	for _, e := range rec.events() {
		if seen[e.Owner] || e.Attempt != 1 || string(e.Payload) != "p"+e.Owner[1:] {
			t.Errorf("event %+v: want one delivery per owner, with its payload", e)
		}
		seen[e.Owner] = true
	}
	if len(seen) != n {
		t.Fatalf("%d owners' events handled, want %d", len(seen), n)
	}
	if idx := indexOf(t, s); len(idx) != 0 {
		t.Fatalf("owners indexed after the sweep: %v", idx)
	}
}
