package expset

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// WithEvictingServer lets Open accept a server whose maxmemory-policy may
// evict keys (any volatile-* or allkeys-* policy), for a set that must share
// such a server. By default Open refuses one with ErrNotDurable: when memory
// runs out, Redis may then evict a live owner set (every owner key of a set
// without expiry events has a TTL, the first a volatile-* policy picks), and
// a quota admits past its limit, and a lapse becomes no event, without any
// error. Only noeviction is safe. With this option Open skips the check and
// its round trip.
func WithEvictingServer() OpenOption {
	return openOption(func(c *setConfig) error { c.evictingServer = true; return nil })
}

// serverInfo is what Open reads from one server's INFO for the checks of
// its configuration.
type serverInfo struct {
	addr    string // the node ("" for the client's only server)
	policy  string // maxmemory_policy; "" when INFO does not say
	aof     string // aof_enabled: "1", "0", or "" when INFO does not say
	version string // redis_version (Valkey reports the Redis version it implements)
}

// checkServerConfig reads INFO (its default sections: one round trip) from
// every server behind rdb and fails with ErrNotDurable, naming the server,
// when one may evict the set's keys (unless WithEvictingServer) or, for
// WithDurability's AOF, runs without it; with ErrServerVersion when
// WithDurability's AOF meets a server without WAITAOF (before Redis 7.2). A
// server that does not say (miniredis, an ACL that denies INFO) passes. It
// sends nothing when there is nothing to check.
func checkServerConfig(ctx context.Context, rdb redis.UniversalClient, name string, cfg *setConfig) error {
	if cfg.evictingServer && !cfg.durable.AOF {
		return nil
	}
	var (
		mu    sync.Mutex
		infos []serverInfo
	)
	err := forEachServer(ctx, rdb, func(ctx context.Context, c redis.UniversalClient, addr string, _ int) error {
		txt, err := c.Info(ctx).Result()
		if err != nil {
			if isRedisError(err) {
				return nil // INFO refused: nothing known, nothing refused
			}
			return fmt.Errorf("expset: open %q: reading INFO of %s: %w", name, addrOrDefault(addr), err)
		}
		f := infoFields(txt)
		mu.Lock()
		infos = append(infos, serverInfo{addr: addr, policy: f["maxmemory_policy"], aof: f["aof_enabled"], version: f["redis_version"]})
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].addr < infos[j].addr })
	for _, in := range infos {
		where := addrOrDefault(in.addr)
		switch {
		case !cfg.evictingServer && in.policy != "" && in.policy != "noeviction":
			return fmt.Errorf("%w: cannot open set %q: %s has maxmemory-policy %s, which may evict the set's keys when memory runs out "+
				"(a quota then admits past its limit and lapses become no events): run CONFIG SET maxmemory-policy noeviction there "+
				"(on a managed service, its parameter group), or open with WithEvictingServer to accept the risk",
				ErrNotDurable, name, where, in.policy)
		case cfg.durable.AOF && in.version != "" && !atLeast(in.version, "7.2.0"):
			return fmt.Errorf("%w: cannot open set %q: %s runs Redis %s: WithDurability's aof needs WAITAOF, new in Redis 7.2; ask for replicas alone",
				ErrServerVersion, name, where, in.version)
		case cfg.durable.AOF && in.aof == "0":
			return fmt.Errorf("%w: cannot open set %q: WithDurability asks for the AOF, and %s has appendonly off: run CONFIG SET appendonly yes there, or ask for replicas alone",
				ErrNotDurable, name, where)
		}
	}
	return nil
}

// atLeast reports whether version v is want or later (a version that does
// not parse counts as later: nothing is known to be missing).
func atLeast(v, want string) bool {
	return !serverVersion{version: v}.olderThan(want)
}

// olderThan reports whether v is older than version want. A version that
// does not parse is not older: a server that reports one is not known to
// lack anything.
func (v serverVersion) olderThan(want string) bool {
	have, ok1 := parseVersion(v.version)
	w, ok2 := parseVersion(want)
	if !ok1 || !ok2 {
		return false
	}
	for i := range have {
		if have[i] != w[i] {
			return have[i] < w[i]
		}
	}
	return false
}

// infoFields reads the "field:value" lines of an INFO reply.
func infoFields(txt string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(txt, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// forEachServer calls fn for every server behind rdb, with a client of that
// server alone, its address and the protocol the client speaks: every
// master of a ClusterClient, every shard of a Ring (concurrently), or the
// one server of any other client (with address "" and protocol -1 when its
// kind is unknown).
func forEachServer(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, c redis.UniversalClient, addr string, protocol int) error) error {
	one := func(ctx context.Context, c *redis.Client) error {
		return fn(ctx, c, c.Options().Addr, c.Options().Protocol)
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, one)
	case *redis.Ring:
		return c.ForEachShard(ctx, one)
	case *redis.Client:
		return one(ctx, c)
	}
	return fn(ctx, rdb, "", -1)
}

// evictedKeys returns, for each shard, the evicted_keys count (INFO stats)
// of the server that holds it: one round trip per server. A server that
// does not say (miniredis, an ACL that denies INFO) counts 0.
func (s *Set) evictedKeys(ctx context.Context) ([]int64, error) {
	out := make([]int64, len(s.shards))
	read := map[redis.UniversalClient]int64{}
	for i, sk := range s.shards {
		var c redis.UniversalClient = s.rdb
		if srv := s.st.ServerOf(ctx, sk.Due); srv != nil {
			c = srv
		}
		n, ok := read[c]
		if !ok {
			txt, err := c.Info(ctx, "stats").Result()
			if err != nil && !isRedisError(err) {
				return nil, fmt.Errorf("expset: stats of %q: reading INFO stats: %w", s.name, err)
			}
			n, _ = strconv.ParseInt(infoFields(txt)["evicted_keys"], 10, 64)
			read[c] = n
		}
		out[i] = n
	}
	return out, nil
}
