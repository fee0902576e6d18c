package expset

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/redistest"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// deliveries runs a Sweeper and a Consume of s with opts until the test
// ends, and returns the members handled so far.
func deliveries(t *testing.T, s *Set, opts ...LoopOption) func() map[string]bool {
	t.Helper()
	var mu sync.Mutex
	got := map[string]bool{}
	var wo []SweeperOption
	var co []ConsumeOption
	for _, o := range opts {
		wo, co = append(wo, o), append(co, o)
	}
	runSweeper(t, newSweeper(t, s, wo...))
	background(t, "Consume", func(ctx context.Context) error {
		return s.Consume(ctx, "g", "c", func(_ context.Context, e Expiry) error {
			mu.Lock()
			got[e.Member] = true
			mu.Unlock()
			return nil
		}, co...)
	})
	return func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]bool, len(got))
		for k := range got {
			out[k] = true
		}
		return out
	}
}

// The wake-up tests give the loops a safety poll of a minute, twice what
// waitFor waits: what they deliver, wake-ups delivered.

// TestWakeUpsDeliver: with a safety poll of a minute, a member added while
// the sweeper and the consumer sleep (its owner's deadline the earliest of
// its shard, so the write wakes the sweeper; the sweep wakes the consumer)
// is handled at once, on every backend; so are members added in a burst
// over several shards, and a dead letter kicked back.
func TestWakeUpsDeliver(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(4), WithExpiryEvents()))
		got := deliveries(t, s, WithPollInterval(time.Minute))
		ctx := context.Background()
		// Let both loops take their first look and go to sleep.
		time.Sleep(200 * time.Millisecond)
		must[time.Time](t)(s.Add(ctx, "alice", "m1", 50*time.Millisecond))
		waitFor(t, "m1 handled", func() bool { return got()["m1"] })
		for i := range 20 {
			must[time.Time](t)(s.Add(ctx, fmt.Sprintf("owner%d", i), fmt.Sprintf("b%d", i), time.Duration(10+i)*time.Millisecond))
		}
		waitFor(t, "the burst handled", func() bool {
			g := got()
			for i := range 20 {
				if !g[fmt.Sprintf("b%d", i)] {
					return false
				}
			}
			return true
		})
	})
}

// TestLostWakeUpsStillDeliver: when every wake-up is lost, the safety poll
// (WithPollInterval) still delivers each member, on every backend.
func TestLostWakeUpsStillDeliver(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(4), WithExpiryEvents()))
		var dropped atomic.Int64
		s.dropWake = func(string) bool { dropped.Add(1); return true }
		got := deliveries(t, s, WithPollInterval(300*time.Millisecond))
		time.Sleep(100 * time.Millisecond)
		for i := range 10 {
			must[time.Time](t)(s.Add(context.Background(), fmt.Sprintf("o%d", i), fmt.Sprintf("m%d", i), 20*time.Millisecond))
		}
		waitFor(t, "every member handled", func() bool { return len(got()) == 10 })
		if dropped.Load() == 0 {
			t.Error("no wake-up was published (and dropped)")
		}
	})
}

// TestWakeUpsSurviveRestart: after a SIGKILL and restart of the server, the
// subscriptions come back (go-redis re-subscribes) and wake the loops
// again: a member added after the restart is handled with a safety poll of
// a minute. Errors of the outage reach Hooks.OnError.
func TestWakeUpsSurviveRestart(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	if testing.Short() {
		t.Skip("kills and restarts a redis-server; skipped with -short")
	}
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	var subErrs atomic.Int64
	s := must[*Set](t)(Open(context.Background(), rdb, uniqueName(t, rdb), WithShards(4), WithExpiryEvents(),
		WithHooks(Hooks{OnError: func(_ context.Context, ci CallInfo, _ time.Duration) {
			if ci.Op == "subscribe" {
				subErrs.Add(1)
			}
		}})))
	got := deliveries(t, s, WithPollInterval(time.Minute))
	ctx := context.Background()
	time.Sleep(200 * time.Millisecond)
	must[time.Time](t)(s.Add(ctx, "alice", "before", 20*time.Millisecond))
	waitFor(t, "the member added before the restart handled", func() bool { return got()["before"] })

	srv.Kill()
	time.Sleep(time.Second)
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	waitFor(t, "the client reconnects", func() bool { return rdb.Ping(ctx).Err() == nil })
	// The subscriptions come back within their reconnect backoff (at most
	// a second); a write before that is covered by the wake-up every
	// re-subscription gives.
	for i := range 5 {
		_, err := s.Add(ctx, "bob", fmt.Sprintf("after%d", i), 20*time.Millisecond)
		if err != nil {
			t.Fatalf("Add after the restart: %v", err)
		}
		waitFor(t, "a member added after the restart handled", func() bool { return got()[fmt.Sprintf("after%d", i)] })
		time.Sleep(300 * time.Millisecond)
	}
	if subErrs.Load() == 0 {
		t.Error("the subscriptions reported no error across the outage")
	}
}

// TestWakeUpsSurviveFailover: after CLUSTER FAILOVER of the masters of
// every shard, the subscriptions follow the channels to the new masters
// (the old master drops its subscribers of a slot it no longer serves, with
// an sunsubscribe the client does not act on by itself) and wake the loops
// again: members added after the failovers are handled with a safety poll
// of a minute.
func TestWakeUpsSurviveFailover(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	cc := cl.Client(t)
	ctx := context.Background()
	s := must[*Set](t)(Open(ctx, cc, uniqueName(t, cc), WithShards(2), WithExpiryEvents()))
	got := deliveries(t, s, WithPollInterval(time.Minute))
	time.Sleep(200 * time.Millisecond)
	must[time.Time](t)(s.Add(ctx, "alice", "before", 20*time.Millisecond))
	waitFor(t, "the member added before the failovers handled", func() bool { return got()["before"] })
	for i, sk := range s.shards {
		promoted := cl.Failover(t, cl.MasterFor(sk.Events))
		t.Logf("shard %d's master failed over to %s", i, promoted.Addr)
	}
	for i := range 10 {
		owner := fmt.Sprintf("o%d", i) // over both shards
		if _, err := s.Add(ctx, owner, fmt.Sprintf("after%d", i), 20*time.Millisecond); err != nil {
			t.Fatalf("Add after the failovers: %v", err)
		}
		waitFor(t, "a member added after the failovers handled", func() bool { return got()[fmt.Sprintf("after%d", i)] })
	}
}

// TestLookingStretchesWhileUp: a safety poll looks at a shard at every
// poll while its subscription is down, and at every healthyStretch-th
// while it is up; a shard never looked at is looked at at once.
func TestLookingStretchesWhileUp(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_000_000)
	every := 10 * time.Second
	for _, c := range []struct {
		since time.Duration // since the last look; < 0: never looked
		up    bool
		want  bool
	}{
		{-1, true, true}, {-1, false, true},
		{every, false, true}, {every, true, false},
		{healthyStretch*every - every/2 - time.Millisecond, true, false},
		{healthyStretch*every - every/2, true, true},
		{healthyStretch*every - 3*time.Millisecond, true, true}, // a timer a little early
		{healthyStretch * every, true, true},
	} {
		last := time.Time{}
		if c.since >= 0 {
			last = t0.Add(-c.since)
		}
		if got := looking(t0, last, every, c.up); got != c.want {
			t.Errorf("looking(%v since the last look, up %v) = %v, want %v", c.since, c.up, got, c.want)
		}
	}
}

// TestSubscriptionUpFollowsTheConnection: a loop's wake-ups report their
// subscription up once subscribed, down while the server is gone, and up
// again once go-redis has re-subscribed.
func TestSubscriptionUpFollowsTheConnection(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	s := must[*Set](t)(Open(context.Background(), rdb, uniqueName(t, rdb), WithShards(4), WithExpiryEvents(),
		WithHooks(Hooks{OnError: func(context.Context, CallInfo, time.Duration) {}})))
	wk := s.listen("subscribe", func(k *store.Keys) string { return k.EvWake })
	defer wk.close()
	up := func() bool {
		for i := range 4 {
			if !wk.up(i) {
				return false
			}
		}
		return true
	}
	waitFor(t, "subscribed", up)
	mr.Close()
	waitFor(t, "down with the server", func() bool { return !wk.up(0) })
	if err := mr.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	waitFor(t, "re-subscribed", up)
	if new(wakeups).up(0) {
		t.Error("wake-ups without a subscription report it up")
	}
}

// TestIdleLoopsLookEverySecondPollWhileSubscribed: an idle Consume and an
// idle Sweeper.Run, their subscriptions up, look at each shard at every
// second safety poll: over 2s at a poll of 100ms, at most 11 XPENDING and
// 11 head reads (ZRANGE) per shard, against 20 of each at every poll (a
// loaded machine may make fewer, never more).
func TestIdleLoopsLookEverySecondPollWhileSubscribed(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	mr := miniredis.RunT(t)
	var cmds commandCounter
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	rdb.AddHook(&cmds)
	t.Cleanup(func() { _ = rdb.Close() })
	const shards, poll, window = 4, 100 * time.Millisecond, 2 * time.Second
	s := must[*Set](t)(Open(context.Background(), rdb, uniqueName(t, rdb), WithShards(shards), WithExpiryEvents()))
	consumeInBackground(t, s, "g", "c", func(context.Context, Expiry) error { return nil }, WithPollInterval(poll), WithoutSweeper())
	runSweeper(t, newSweeper(t, s, WithPollInterval(poll)))
	// The first looks, every shard at once.
	waitFor(t, "the loops looking", func() bool { return cmds.count("xpending") >= shards && cmds.count("zrange") >= shards })
	cmds.reset()
	time.Sleep(window)
	most := shards * int(window/(2*poll)+1)
	for _, name := range []string{"xpending", "zrange"} {
		n := cmds.count(name)
		t.Logf("%d %s", n, name)
		if n > most {
			t.Errorf("%d %s in %v, want at most %d", n, name, window, most)
		}
	}
}
