package expset

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// durableWrites makes every write WithDurability covers on a set of rdb
// opened with opts, and reports which were acknowledged: Add (no
// ErrNotDurable), Acquire and AcquireMany (Decision.Durable), a sweep that
// wrote events (SweepStats.NotDurable 0). Each write must succeed otherwise.
type durableWrites struct {
	add, acquire, existing, denied, many, sweep bool
}

func writeDurably(t *testing.T, rdb redis.UniversalClient, opts ...OpenOption) durableWrites {
	t.Helper()
	ctx := context.Background()
	clk := newFakeClock()
	s := must[*Set](t)(Open(ctx, rdb, uniqueName(t, rdb), append([]OpenOption{WithClock(clk.Now), WithExpiryEvents(), WithShards(4)}, opts...)...))
	q := must[*Quota](t)(NewQuota(s, 1))
	var w durableWrites

	deadline, err := s.Add(ctx, "adder", "m", time.Second)
	switch {
	case deadline.IsZero():
		t.Fatalf("Add returned no deadline: %v", err)
	case err != nil && !errors.Is(err, ErrNotDurable):
		t.Fatalf("Add: %v", err)
	}
	w.add = err == nil

	d := must[Decision](t)(q.Acquire(ctx, "owner", "a", time.Second))
	if !d.Allowed || d.Existing {
		t.Fatalf("Acquire: %+v", d)
	}
	w.acquire = d.Durable
	d = must[Decision](t)(q.Acquire(ctx, "owner", "a", time.Second))
	w.existing = d.Durable
	d = must[Decision](t)(q.Acquire(ctx, "owner", "b", time.Second))
	if d.Allowed {
		t.Fatalf("Acquire at the limit: %+v", d)
	}
	w.denied = d.Durable

	var reqs []AcquireRequest
	for i := range 20 {
		reqs = append(reqs, AcquireRequest{Owner: fmt.Sprint("many-", i), Member: "m", TTL: time.Second})
	}
	w.many = true
	for i, d := range must[[]Decision](t)(q.AcquireMany(ctx, reqs)) {
		if !d.Allowed {
			t.Fatalf("AcquireMany #%d: %+v", i, d)
		}
		w.many = w.many && d.Durable
		if i > 0 && d.Durable != w.many {
			t.Errorf("AcquireMany: #%d Durable %v, #0 %v (one server, one wait)", i, d.Durable, w.many)
		}
	}

	clk.Advance(2 * time.Second)
	st := must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
	if st.Expired != 22 {
		t.Fatalf("sweep: %+v, want 22 expired", st)
	}
	if st.NotDurable != 0 && st.NotDurable != st.Expired {
		t.Errorf("sweep: NotDurable %d of %d expired, in one batch per shard", st.NotDurable, st.Expired)
	}
	w.sweep = st.NotDurable == 0
	return w
}

// startReplicated starts a dedicated master (with args) and one replica of
// it, and waits until the replica is in sync.
func startReplicated(t *testing.T, args ...string) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t, args...)
	host, port, err := net.SplitHostPort(master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	replica = redistest.Start(t, "--replicaof", host, port)
	waitSynced(t, master.Client(t), 1)
	return master, replica
}

// waitSynced polls master until n replicas are connected and online.
func waitSynced(t *testing.T, master *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info := must[map[string]string](t)(redistest.Info(ctx, master, "replication"))
		online := 0
		for i := range n {
			if v := info[fmt.Sprint("slave", i)]; v != "" && strings.Contains(v, "state=online") {
				online++
			}
		}
		if online == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas of %s not in sync: %v", master.Options().Addr, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDurability: with WithDurability, Add, Acquire, AcquireMany and the
// sweeper's events report whether the replicas (or the AOF) acknowledged
// them, without failing: on miniredis (WAIT returns 0 at once) and on a
// server or cluster without replicas never; on a master with a replica in
// sync always, for the writes that wrote (a denial or an Existing member
// waits for nothing); with the replica stopped (SIGSTOP) never, each write
// still taking effect.
func TestDurability(t *testing.T) {
	t.Parallel()
	none := durableWrites{}
	all := durableWrites{add: true, acquire: true, many: true, sweep: true}
	check := func(t *testing.T, what string, got, want durableWrites) {
		t.Helper()
		if got != want {
			t.Errorf("%s: acknowledged %+v, want %+v", what, got, want)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		check(t, "WAIT 1", writeDurably(t, rdb, WithDurability(1, false, 50*time.Millisecond)), none)
		check(t, "WAITAOF, unknown to miniredis", writeDurably(t, rdb, WithDurability(0, true, 50*time.Millisecond)), none)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		check(t, "WAIT 1 without replicas", writeDurably(t, redistest.Client(t), WithDurability(1, false, 20*time.Millisecond)), none)

		master, replica := startReplicated(t)
		rdb := master.Client(t)
		// A minute is past the client's ReadTimeout: the wait follows the
		// script on its connection. Two seconds fit in the script's pipeline.
		check(t, "WAIT 1, a replica in sync", writeDurably(t, rdb, WithDurability(1, false, time.Minute)), all)
		check(t, "WAIT 1 in the script's pipeline, a replica in sync", writeDurably(t, rdb, WithDurability(1, false, 2*time.Second)), all)
		if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		check(t, "WAIT 1 in the script's pipeline, after SCRIPT FLUSH (NOSCRIPT)", writeDurably(t, rdb, WithDurability(1, false, 2*time.Second)), all)
		check(t, "WAIT 2, one replica", writeDurably(t, rdb, WithDurability(2, false, 20*time.Millisecond)), none)
		if err := replica.Pause(); err != nil {
			t.Fatal(err)
		}
		check(t, "WAIT 1, the replica stopped", writeDurably(t, rdb, WithDurability(1, false, 50*time.Millisecond)), none)
		if err := replica.Resume(); err != nil {
			t.Fatal(err)
		}

		// The AOF: WAITAOF is new in 7.2.
		info := must[map[string]string](t)(redistest.Info(context.Background(), rdb, "server"))
		_, err := Open(context.Background(), rdb, uniqueName(t, rdb), WithDurability(0, true, time.Second))
		if !atLeast(info["redis_version"], "7.2.0") {
			if !errors.Is(err, ErrServerVersion) {
				t.Fatalf("WithDurability's aof on Redis %s: %v, want ErrServerVersion", info["redis_version"], err)
			}
			t.Logf("Redis %s has no WAITAOF: the AOF cases need 7.2 or later", info["redis_version"])
			return
		}
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("WithDurability's aof with appendonly off: %v, want ErrNotDurable", err)
		}
		aofMaster, _ := startReplicated(t, "--appendonly", "yes")
		check(t, "WAITAOF 1 0", writeDurably(t, aofMaster.Client(t), WithDurability(0, true, time.Minute)), all)
		// The replica's appendonly is off: its AOF never acknowledges.
		check(t, "WAITAOF 1 1, the replica without AOF", writeDurably(t, aofMaster.Client(t), WithDurability(1, true, 20*time.Millisecond)), none)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		// The shared cluster has no replicas; TestFailoverDurability runs
		// one with them.
		cc := redistest.SharedCluster(t).Client(t)
		check(t, "WAIT 1 without replicas", writeDurably(t, cc, WithDurability(1, false, 20*time.Millisecond)), none)
	})
}

// TestDurabilityClusterWaitsOnTheSlotsMaster: on a cluster whose masters
// each have a replica, with one master's replica stopped (SIGSTOP), a write
// is Durable exactly when its key's master is another one: the wait goes to
// the master that ran the script, for Acquire and AcquireMany, also when the
// masters had lost their scripts (NOSCRIPT).
func TestDurabilityClusterWaitsOnTheSlotsMaster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	cc := c.Client(t)
	// A second: on a loaded machine a healthy replica has taken over 200 ms
	// to acknowledge; each write to the stopped replica's master waits it out.
	s := must[*Set](t)(Open(ctx, cc, uniqueName(t, cc), WithShards(16), WithDurability(1, false, time.Second)))
	q := must[*Quota](t)(NewQuota(s, 10))
	stopped := c.MasterFor(s.shards[0].Due)
	var replica *redistest.Node
	for _, n := range c.Nodes() {
		if n.Role == redistest.RoleReplica && n.MasterID == stopped.ID {
			replica = n
		}
	}
	if replica == nil {
		t.Fatalf("master %s has no replica", stopped.Addr)
	}
	for _, n := range c.Nodes() {
		if n.Role == redistest.RoleMaster {
			waitSynced(t, n.Server.Client(t), 1)
		}
	}
	if err := replica.Server.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Server.Resume() })

	var reqs []AcquireRequest
	for i := range 48 {
		reqs = append(reqs, AcquireRequest{Owner: fmt.Sprint("owner-", i), Member: "m", TTL: time.Minute})
	}
	want := func(owner string) bool { return c.MasterFor(s.OwnerKey(owner)).ID != stopped.ID }
	check := func(what string, owner string, d Decision) {
		t.Helper()
		if !d.Allowed || d.Existing {
			t.Fatalf("%s %s: %+v", what, owner, d)
		}
		if d.Durable != want(owner) {
			t.Errorf("%s %s (master %s; %s's replica stopped): Durable %v, want %v", what, owner,
				c.MasterFor(s.OwnerKey(owner)).Addr, stopped.Addr, d.Durable, want(owner))
		}
	}
	for i, r := range reqs[:16] {
		if i == 8 {
			for _, n := range c.Nodes() {
				if n.Role == redistest.RoleMaster {
					must[string](t)(n.Server.Client(t).ScriptFlush(ctx).Result())
				}
			}
		}
		check("Acquire", r.Owner, must[Decision](t)(q.Acquire(ctx, r.Owner, r.Member, r.TTL)))
	}
	for i, d := range must[[]Decision](t)(q.AcquireMany(ctx, reqs[16:])) {
		check("AcquireMany", reqs[16+i].Owner, d)
	}
}
