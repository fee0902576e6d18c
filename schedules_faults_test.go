package expset

import (
	"context"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// runScheduleThrough runs an @every 1s schedule on s under a Sweeper.Run
// for 8 s, calling fault 3 s in, then stops the sweeper, sweeps once more
// and checks the ticks written: one event for each from the first to the
// last due, none twice.
func runScheduleThrough(t *testing.T, s *Set, fault func()) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	first, err := s.PutSchedule(ctx, "beat", "@every 1s")
	if err != nil {
		t.Fatal(err)
	}
	stop := runSweeper(t, newSweeper(t, s, WithLeaseTTL(time.Second)))
	time.Sleep(time.Until(start.Add(3 * time.Second)))
	fault()
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	stop()
	end := time.Now()
	waitHealed(t, "a last sweep", faultWait, func() error { _, err := newSweeper(t, s).SweepOnce(ctx); return err })
	got := ticksOf(t, s, "beat")
	var want []time.Time
	for tk := first; !tk.After(end); tk = tk.Add(time.Second) {
		want = append(want, tk)
	}
	if len(got) > len(want) && got[len(got)-1].Sub(end) <= time.Second {
		got = got[:len(want)] // a tick that fell due between end and the last sweep
	}
	sameTimes(t, "ticks", got, want)
}

// TestScheduleSurvivesRestartWithAOF: the server (AOF, fsync always) is
// killed (SIGKILL) and restarted while a sweeper runs a schedule: every
// tick is written once, those due while it was down once it is back.
func TestScheduleSurvivesRestartWithAOF(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := srv.Client(t)
	s := must[*Set](t)(Open(context.Background(), rdb, uniqueName(t, rdb), WithShards(2), WithExpiryEvents(), WithConsumerGroups("g")))
	runScheduleThrough(t, s, func() {
		srv.Kill()
		if err := srv.Restart(); err != nil {
			t.Fatalf("restart: %v", err)
		}
		waitHealed(t, "the client reconnects after the restart", faultWait, func() error { return rdb.Ping(context.Background()).Err() })
	})
}

// TestScheduleSurvivesFailover: the master of the schedule's shard in a
// Redis Cluster dies (SIGKILL) and its replica takes over while a sweeper
// with WithDurability runs the schedule: every tick is written once.
func TestScheduleSurvivesFailover(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	cc := cl.Client(t, func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second })
	s := must[*Set](t)(Open(context.Background(), cc, uniqueName(t, cc), WithShards(3), WithExpiryEvents(), WithConsumerGroups("g"),
		WithDurability(1, false, time.Second)))
	runScheduleThrough(t, s, func() {
		master := cl.MasterFor(s.shards[s.ShardOf("beat")].Events)
		promoted := cl.KillMaster(t, master)
		t.Logf("killed master %s; replica %s serves the schedule's shard now", master.Addr, promoted.Addr)
		waitHealed(t, "the cluster client follows the failover", faultWait, func() error {
			_, err := s.Schedules(context.Background())
			return err
		})
	})
}
