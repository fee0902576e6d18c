package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timings on a 2-core machine (go test -race, EXPSET_REQUIRE_REDIS=1): a
// cluster of 3 masters, or of 3 masters + 3 replicas, is healthy 2.3-2.5 s
// after StartCluster/SharedCluster is called (redis-cli waits for gossip in
// 1 s steps, so now and then it takes 3.5-7 s). In TestClusterFailover the
// graceful CLUSTER FAILOVER takes 0.25-0.6 s and the kill until the replica
// serves the slots 2.4-3.1 s (node timeout 1 s, then the election delay).
// The whole package runs in 10-15 s.

func TestKeySlot(t *testing.T) {
	// The reference value of the cluster spec: CRC16("123456789") = 0x31C3.
	for key, want := range map[string]int{"123456789": 12739, "{123456789}x": 12739, "a{}b": KeySlot("a{}b")} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if KeySlot("x:{7}:a") != KeySlot("x:{7}:b") || KeySlot("x:{7}:a") == KeySlot("x:{8}:a") {
		t.Fatal("hash tags do not decide the slot")
	}
}

func TestKeySlotMatchesRedis(t *testing.T) {
	cc := SharedCluster(t).Client(t)
	ctx := context.Background()
	keys := []string{"", "a", "x:{7}:a", "{}x", "{{a}}", "a{}b{c}", "foo{bar}{zap}", "{user1000}.following", "é{ü}"}
	for i := 0; i < 200; i++ {
		keys = append(keys, fmt.Sprintf("k:%d", i*7919))
	}
	for _, k := range keys {
		want, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := KeySlot(k); int64(got) != want {
			t.Errorf("KeySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

func TestClusterTwoKeyScript(t *testing.T) {
	c := SharedCluster(t)
	cc := c.Client(t)
	ctx := context.Background()
	script := redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return redis.call('MGET', KEYS[1], KEYS[2])`)
	got, err := script.Run(ctx, cc, []string{"x:{7}:a", "x:{7}:b"}, "1", "2").StringSlice()
	if err != nil {
		t.Fatalf("two-key script on one slot: %v", err)
	}
	if strings.Join(got, ",") != "1,2" {
		t.Fatalf("script returned %q, want [1 2]", got)
	}
	// The keys live on the master MasterFor names; asked directly, it answers.
	m := c.MasterFor("x:{7}:a")
	if m == nil {
		t.Fatal("no master for x:{7}:a")
	}
	if v, err := m.Server.Client(t).Get(ctx, "x:{7}:b").Result(); err != nil || v != "2" {
		t.Fatalf("GET x:{7}:b on %s: %q, %v", m.Addr, v, err)
	}
}

func TestClusterRejectsCrossSlotScripts(t *testing.T) {
	c := SharedCluster(t)
	cc := c.Client(t)
	ctx := context.Background()

	// Declared keys in two slots: CROSSSLOT (miniredis accepts this).
	two := redis.NewScript(`redis.call('SET', KEYS[1], 1); redis.call('SET', KEYS[2], 1); return 1`)
	err := two.Run(ctx, cc, []string{"x:{7}:a", "x:{8}:b"}).Err()
	if err == nil || !redis.HasErrorPrefix(err, "CROSSSLOT") {
		t.Fatalf("script over x:{7}:a and x:{8}:b: got %v, want a CROSSSLOT error", err)
	}

	// An undeclared key on another master: refused too.
	home := c.MasterFor("x:{7}:a")
	var other string
	for i := 0; other == "" && i < 100; i++ {
		if k := fmt.Sprintf("x:{%d}:b", i); c.MasterFor(k).ID != home.ID {
			other = k
		}
	}
	if other == "" {
		t.Fatal("no key on another master among x:{0..99}:b")
	}
	undeclared := redis.NewScript(`redis.call('SET', KEYS[1], 1); redis.call('SET', ARGV[1], 1); return 1`)
	err = undeclared.Run(ctx, cc, []string{"x:{7}:a"}, other).Err()
	if err == nil || !strings.Contains(err.Error(), "non local key") {
		t.Fatalf("script touching undeclared %s on another master: got %v, want a 'non local key' error", other, err)
	}
}

func TestClusterKeysOnAllMasters(t *testing.T) {
	c := SharedCluster(t)
	cc := c.Client(t)
	ctx := context.Background()
	nodes := c.Nodes()
	slots := 0
	for _, n := range nodes {
		if n.Role != RoleMaster || n.Failed || n.Server == nil || !n.Server.Running() {
			t.Fatalf("shared cluster node %+v is not a running master", n)
		}
		for _, r := range n.Slots {
			slots += r[1] - r[0] + 1
		}
	}
	if len(nodes) != 3 || slots != NumSlots {
		t.Fatalf("shared cluster: %d nodes serving %d slots, want 3 serving %d", len(nodes), slots, NumSlots)
	}
	perMaster := map[string]int{}
	for i := 0; i < 60; i++ {
		key := fmt.Sprintf("spread:%d", i)
		if err := cc.Set(ctx, key, i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		m := masterOf(nodes, KeySlot(key))
		// A direct client of the wrong node would get MOVED instead.
		if n, err := m.Server.Client(t).Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s on %s: %d, %v", key, m.Addr, n, err)
		}
		perMaster[m.Addr]++
	}
	if len(perMaster) != 3 {
		t.Fatalf("60 keys landed on %d masters (%v), want all 3", len(perMaster), perMaster)
	}
}

func TestClusterFailover(t *testing.T) {
	SystemTest(t)
	begin := time.Now()
	c := StartCluster(t, ClusterOptions{ReplicasPerMaster: 1})
	t.Logf("3 masters + 3 replicas healthy after %v", time.Since(begin).Round(time.Millisecond))
	cc := c.Client(t)

	masters, replicas := 0, 0
	for _, n := range c.Nodes() {
		switch n.Role {
		case RoleMaster:
			masters++
		case RoleReplica:
			replicas++
		}
	}
	if masters != 3 || replicas != 3 {
		t.Fatalf("got %d masters and %d replicas, want 3 and 3", masters, replicas)
	}

	for _, tc := range []struct {
		name     string
		takeOver func(testing.TB, *Node) *Node
		check    func(old, promoted *Node) error
	}{
		{"graceful", c.Failover, func(old, promoted *Node) error {
			for _, n := range c.Nodes() {
				if n.ID == old.ID && (n.Role != RoleReplica || n.MasterID != promoted.ID) {
					return fmt.Errorf("old master %s is %s of %q, want a replica of %s", n.Addr, n.Role, n.MasterID, promoted.ID)
				}
			}
			return nil
		}},
		{"kill", c.KillMaster, func(old, _ *Node) error {
			if old.Server.Running() {
				return fmt.Errorf("killed master %s still running", old.Addr)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "failover:{" + tc.name + "}"
			writeReplicated(t, cc, key, tc.name)
			old := c.MasterFor(key)
			begin := time.Now()
			promoted := tc.takeOver(t, old)
			t.Logf("%s: %s serves the slots of %s after %v", tc.name, promoted.Addr, old.Addr, time.Since(begin).Round(time.Millisecond))
			if m := c.MasterFor(key); m == nil || m.ID != promoted.ID {
				t.Fatalf("after failover MasterFor(%s) = %+v, want %s", key, m, promoted.Addr)
			}
			if err := tc.check(old, promoted); err != nil {
				t.Fatal(err)
			}
			readEventually(t, cc, key, tc.name)
			if err := cc.Set(context.Background(), key, "again", 0).Err(); err != nil {
				t.Fatalf("write to the promoted master: %v", err)
			}
		})
	}
}

// writeReplicated sets key through the master's client and waits (bounded)
// until a replica has acknowledged it: WAIT counts the writes of its own
// connection, so both go through one pipeline.
func writeReplicated(t *testing.T, cc *redis.ClusterClient, key, val string) {
	t.Helper()
	ctx := context.Background()
	mc, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var acked *redis.IntCmd
	if _, err := mc.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, val, 0)
		acked = redis.NewIntCmd(ctx, "wait", 1, 10000)
		return p.Process(ctx, acked)
	}); err != nil {
		t.Fatalf("SET %s + WAIT: %v", key, err)
	}
	if acked.Val() < 1 {
		t.Fatalf("WAIT 1: no replica acknowledged the write of %s within 10s", key)
	}
}

// readEventually reads key through cc until it gives want, failing after 30s.
func readEventually(t *testing.T, cc *redis.ClusterClient, key, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc.ReloadState(ctx)
	err := poll(ctx, "GET "+key, func(ctx context.Context) error {
		v, err := cc.Get(ctx, key).Result()
		if err == nil && v != want {
			err = fmt.Errorf("got %q, want %q", v, want)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStartClusterErrors(t *testing.T) {
	if _, err := startCluster(ClusterOptions{Masters: 2}); err == nil || !strings.Contains(err.Error(), "at least 3 masters") {
		t.Fatalf("2 masters: got %v", err)
	}
	server, err := Binary()
	if err != nil {
		Unavailable(t, err.Error())
	}
	dir := t.TempDir()
	if err := os.Symlink(server, filepath.Join(dir, "redis-server")); err != nil {
		t.Fatal(err)
	}
	for _, env := range []struct{ bin, path, want string }{
		{"", dir, "neither redis-cli nor valkey-cli is on PATH"},
		{dir, "", "neither redis-cli nor valkey-cli beside EXPSET_REDIS_BIN=" + dir},
	} {
		t.Setenv("EXPSET_REDIS_BIN", env.bin)
		t.Setenv("PATH", env.path) // a server but no CLI
		_, err = startCluster(ClusterOptions{})
		var u unavailableError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), env.want) {
			t.Fatalf("without a CLI: got %v, want an unavailable error saying %q", err, env.want)
		}
	}
}
