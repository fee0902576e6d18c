package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// evictingPolicies are the maxmemory-policy values that may evict a key
// with a TTL: every one but noeviction.
var evictingPolicies = []string{"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
	"allkeys-lru", "allkeys-lfu", "allkeys-random"}

// TestOpenRefusesEvictingServer: Open fails with ErrNotDurable, naming the
// server, its policy and the fix, on a server whose maxmemory-policy may
// evict keys (on a cluster, any one master), and writes nothing;
// WithEvictingServer accepts it; noeviction passes; miniredis, which
// reports no policy, passes.
func TestOpenRefusesEvictingServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refused := func(t *testing.T, rdb redis.UniversalClient, policy, addr string) {
		t.Helper()
		name := uniqueName(t, rdb)
		_, err := Open(ctx, rdb, name)
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("Open on a server with maxmemory-policy %s: %v, want ErrNotDurable", policy, err)
		}
		for _, want := range []string{policy, addr, "CONFIG SET maxmemory-policy noeviction", "WithEvictingServer"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q: %v", want, err)
			}
		}
		if n := must[int64](t)(rdb.Exists(ctx, metaKey(name)).Result()); n != 0 {
			t.Errorf("a refused Open wrote %s", metaKey(name))
		}
		if _, err := Open(ctx, rdb, name, WithEvictingServer()); err != nil {
			t.Errorf("Open WithEvictingServer: %v", err)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		must[*Set](t)(Open(ctx, rdb, "s"))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
		rdb := srv.Client(t)
		for _, p := range evictingPolicies {
			must[string](t)(rdb.ConfigSet(ctx, "maxmemory-policy", p).Result())
			refused(t, rdb, p, srv.Addr)
		}
		must[string](t)(rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Result())
		must[*Set](t)(Open(ctx, rdb, uniqueName(t, rdb)))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartCluster(t, redistest.ClusterOptions{})
		cc := c.Client(t)
		must[*Set](t)(Open(ctx, cc, uniqueName(t, cc)))
		// One master of three evicting is enough to refuse.
		var masters []*redistest.Node
		for _, n := range c.Nodes() {
			if n.Role == redistest.RoleMaster {
				masters = append(masters, n)
			}
		}
		m := masters[len(masters)-1]
		must[string](t)(m.Server.Client(t).ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Result())
		refused(t, cc, "volatile-ttl", m.Addr)
	})
}

// TestStatsEvictedKeys: ShardStats.EvictedKeys is the evicted_keys count of
// the server holding each shard, once its maxmemory-policy has evicted
// keys; 0 on a server that evicted none, or that does not say (miniredis).
func TestStatsEvictedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// evicting gives a server allkeys-random and a maxmemory 2 MB above what
	// it uses.
	evicting := func(ctx context.Context, c *redis.Client) error {
		info, err := redistest.Info(ctx, c, "memory")
		if err != nil {
			return err
		}
		if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-random").Err(); err != nil {
			return err
		}
		used, err := strconv.ParseInt(info["used_memory"], 10, 64)
		if err != nil {
			return err
		}
		return c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+2<<20, 10)).Err()
	}
	// fill writes junk keys through rdb until every server behind it has
	// evicted some (see evicting).
	fill := func(t *testing.T, rdb redis.UniversalClient) {
		t.Helper()
		junk := strings.Repeat("x", 1024)
		for round := 0; round < 20; round++ {
			pipe := rdb.Pipeline()
			for i := range 2000 {
				pipe.Set(ctx, fmt.Sprintf("junk:%d:%d", round, i), junk, 0)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(t *testing.T, rdb redis.UniversalClient, s *Set, wantEvicted bool) {
		t.Helper()
		for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
			var srv redis.UniversalClient = rdb
			if c := s.st.ServerOf(ctx, s.shards[st.Shard].Due); c != nil {
				srv = c
			}
			info := must[map[string]string](t)(redistest.Info(ctx, srv, "stats"))
			// A server over its maxmemory evicts before every command, INFO
			// included, so the count read after Stats may have grown.
			if after := info["evicted_keys"]; after == "" {
				if st.EvictedKeys != 0 {
					t.Errorf("shard %d: EvictedKeys %d, its server reports none", st.Shard, st.EvictedKeys)
				}
			} else if n, err := strconv.ParseInt(after, 10, 64); err != nil || st.EvictedKeys > n {
				t.Errorf("shard %d: EvictedKeys %d, more than INFO of its server says after it (%s)", st.Shard, st.EvictedKeys, after)
			}
			if wantEvicted != (st.EvictedKeys > 0) {
				t.Errorf("shard %d: EvictedKeys %d, want evictions %v", st.Shard, st.EvictedKeys, wantEvicted)
			}
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		check(t, rdb, must[*Set](t)(Open(ctx, rdb, "s", WithShards(2))), false)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Start(t).Client(t)
		s := must[*Set](t)(Open(ctx, rdb, "s", WithShards(2)))
		check(t, rdb, s, false)
		if err := evicting(ctx, rdb); err != nil {
			t.Fatal(err)
		}
		fill(t, rdb)
		check(t, rdb, s, true)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartCluster(t, redistest.ClusterOptions{})
		cc := c.Client(t)
		s := must[*Set](t)(Open(ctx, cc, "s", WithShards(6)))
		check(t, cc, s, false)
		if err := cc.ForEachMaster(ctx, evicting); err != nil {
			t.Fatal(err)
		}
		fill(t, cc)
		check(t, cc, s, true)
	})
}
