package expset

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// admission is one Acquire the master acknowledged.
type admission struct{ owner, member string }

// failoverLoad runs Acquires of new members on s from 8 goroutines until
// stop is closed, and returns the admissions acknowledged: every Allowed
// decision, or with WithDurability only the Durable ones.
func failoverLoad(s *Set, durable bool, stop <-chan struct{}) func() []admission {
	q, err := NewQuota(s, 1<<30)
	if err != nil {
		panic(err)
	}
	var (
		mu    sync.Mutex
		acked []admission
		wg    sync.WaitGroup
		seq   atomic.Int64
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				a := admission{owner: fmt.Sprint("o", n%64), member: fmt.Sprint("g", g, "-", n)}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				d, err := q.Acquire(ctx, a.owner, a.member, time.Hour)
				cancel()
				if err != nil {
					time.Sleep(5 * time.Millisecond) // the master is gone, or redirects
					continue
				}
				if d.Allowed && (!durable || d.Durable) {
					mu.Lock()
					acked = append(acked, a)
					mu.Unlock()
				}
			}
		}()
	}
	return func() []admission { wg.Wait(); return acked }
}

// lost counts the admissions of acked that rdb (the new master, or the
// cluster after the failover) does not hold.
func lost(t *testing.T, rdb redis.UniversalClient, name string, acked []admission) int {
	t.Helper()
	ctx := context.Background()
	s := must[*Set](t)(Open(ctx, rdb, name, WithRecordedConfiguration()))
	n := 0
	for _, a := range acked {
		ok, err := s.Contains(ctx, a.owner, a.member)
		if err != nil {
			t.Fatalf("after the failover: %v", err)
		}
		if !ok {
			n++
		}
	}
	return n
}

// TestFailoverDurability fails a master over under load and counts the
// acknowledged admissions lost, without WithDurability and with it (0).
// The replica is stopped (SIGSTOP) for 300 ms so the master runs ahead of
// it, then resumed and promoted at once (REPLICAOF NO ONE; on the cluster
// CLUSTER FAILOVER TAKEOVER) while the load still runs on the old master,
// which is killed (SIGKILL) 100 ms later: what the old master acknowledged
// that the replica had not applied is gone. On one master with a replica,
// and on a 3-master cluster with a replica per master (the failover of one).
//
//	EXPSET_SYSTEM=1 go test -count=1 -run '^TestFailoverDurability$' -v .
func TestFailoverDurability(t *testing.T) {
	redistest.SystemTest(t)
	opts := map[bool][]OpenOption{
		false: {WithShards(16)},
		true:  {WithShards(16), WithDurability(1, false, time.Second)},
	}
	report := func(t *testing.T, durable bool, acked []admission, n int) {
		t.Helper()
		t.Logf("WithDurability %v: %d acknowledged admissions, %d lost", durable, len(acked), n)
		if len(acked) == 0 {
			t.Fatal("no admission was acknowledged: the load did not run")
		}
		if durable && n != 0 {
			t.Errorf("WithDurability: %d acknowledged (Durable) admissions lost in the failover; want 0", n)
		}
	}
	t.Run("redis", func(t *testing.T) {
		for _, durable := range []bool{false, true} {
			master, replica := startReplicated(t)
			rdb := master.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
			name := "failover"
			s := must[*Set](t)(Open(context.Background(), rdb, name, opts[durable]...))
			// The set's record must be on the replica before the load:
			// under load its replication may otherwise still be on the way
			// when the replica is promoted.
			var synced *redis.Cmd
			if _, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
				p.Set(context.Background(), "expset-test-wait", "1", time.Minute)
				synced = p.Do(context.Background(), "WAIT", 1, faultWait.Milliseconds())
				return nil
			}); err != nil || synced.Val() != int64(1) {
				t.Fatalf("WAIT 1 after Open: %d replicas acknowledged, err %v", synced.Val(), err)
			}
			stop := make(chan struct{})
			wait := failoverLoad(s, durable, stop)
			time.Sleep(300 * time.Millisecond)
			if err := replica.Pause(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			if err := replica.Resume(); err != nil {
				t.Fatal(err)
			}
			newMaster := replica.Client(t)
			must[string](t)(newMaster.Do(context.Background(), "REPLICAOF", "NO", "ONE").Text())
			time.Sleep(100 * time.Millisecond)
			master.Kill()
			close(stop)
			acked := wait()
			report(t, durable, acked, lost(t, newMaster, name, acked))
		}
	})
	t.Run("cluster", func(t *testing.T) {
		for _, durable := range []bool{false, true} {
			c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
			cc := c.Client(t)
			name := "failover"
			s := must[*Set](t)(Open(context.Background(), cc, name, opts[durable]...))
			waitReplicated(t, cc, metaKey(name))
			// The master of shard 0, and its replica.
			var m, r *redistest.Node
			nodes := c.Nodes()
			m = c.MasterFor(s.shards[0].Due)
			for _, n := range nodes {
				if n.Role == redistest.RoleReplica && n.MasterID == m.ID {
					r = n
				}
			}
			if r == nil {
				t.Fatalf("master %s has no replica", m.Addr)
			}
			stop := make(chan struct{})
			wait := failoverLoad(s, durable, stop)
			time.Sleep(300 * time.Millisecond)
			if err := r.Server.Pause(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			if err := r.Server.Resume(); err != nil {
				t.Fatal(err)
			}
			must[string](t)(r.Server.Client(t).Do(context.Background(), "CLUSTER", "FAILOVER", "TAKEOVER").Text())
			time.Sleep(100 * time.Millisecond)
			m.Server.Kill()
			close(stop)
			acked := wait()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if err := c.WaitHealthy(ctx); err != nil {
				t.Fatal(err)
			}
			cancel()
			report(t, durable, acked, lost(t, c.Client(t), name, acked))
		}
	})
}
