package expset

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/redistest"
	"github.com/expset/expset/internal/store"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// backend is one Redis the suite runs on: miniredis, or a real redis-server.
type backend struct {
	name  string
	rdb   redis.UniversalClient
	mr    *miniredis.Miniredis // nil on real Redis
	start time.Time            // when the subtest began (zero when unknown)
}

// eachBackend runs fn as a subtest on miniredis, on a real redis-server and
// on a real three-master Redis Cluster through a ClusterClient (the real ones
// skipped, or failed with EXPSET_REQUIRE_REDIS=1, when redis-server is not
// installed). miniredis cannot stand in for a cluster: it accepts cross-slot
// scripts.
//
// The three subtests run in parallel: each has its own miniredis or its own
// keys (uniqueName). What the whole process or a shared server holds is fn's
// to touch only in a test that does not call t.Parallel (parallel tests never
// overlap such a test), and then with its backends taking turns where they
// would clash: the script cache of a shared server may be flushed (each
// backend has its own), slog's default logger is captured one backend at a
// time (captureSlog). The goroutine check (noLeaks) knows a test's goroutines
// by a label, so it runs in parallel tests too, once all subtests are done. A
// deferred call in the test that calls eachBackend runs before the subtests
// do; use t.Cleanup instead.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		fn(t, backend{name: "miniredis", rdb: c, mr: mr, start: time.Now()})
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		fn(t, backend{name: "redis", rdb: redistest.Client(t), start: time.Now()})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		fn(t, backend{name: "cluster", rdb: redistest.SharedCluster(t).Client(t), start: time.Now()})
	})
}

// reasonOf names why e's member left: "evicted" or "expired".
func reasonOf(e Expiry) string {
	if e.Evicted {
		return "evicted"
	}
	return "expired"
}

// errorReport is one Hooks.OnError call, as tests record it.
type errorReport struct {
	CallInfo
	Retry time.Duration
}

// sweepReport is one Hooks.OnSweep call, as tests record it.
type sweepReport struct {
	CallInfo
	SweepStats
}

// eventReport is one Hooks.OnEvent call, as tests record it.
type eventReport struct {
	CallInfo
	EventInfo
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	// A whole second in the real present: key TTLs on real Redis, which run on
	// the server's clock, then stay sensible.
	return &fakeClock{t: time.Now().Truncate(time.Second)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// uniqueName returns a set name no other test uses, and deletes the set's keys
// when t ends (the real server is shared).
func uniqueName(t testing.TB, rdb redis.UniversalClient) string {
	name := "t" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	t.Cleanup(func() {
		ctx := context.Background()
		for _, k := range setKeys(t, rdb, name) {
			rdb.Del(ctx, k)
		}
	})
	return name
}

// setKeys lists every key of the set called name, sorted: those of its
// shards (expset:{name:shard}...) and of the whole set (expset:{name}...),
// in one SCAN (one per master of a cluster). A set's name holds none of
// the pattern's special characters.
func setKeys(t testing.TB, rdb redis.UniversalClient, name string) []string {
	t.Helper()
	out, err := store.ScanKeys(context.Background(), rdb, store.KeyPrefix+"{"+name+"[:}]*")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// snapshot captures every key of a set and its serialized value, to check
// that a rejected call wrote nothing. It reads the keys' types in one
// pipeline and their values in a second.
func snapshot(t testing.TB, rdb redis.UniversalClient, name string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	keys := setKeys(t, rdb, name)
	if len(keys) == 0 {
		return out
	}
	types := make([]*redis.StatusCmd, len(keys))
	pipe := rdb.Pipeline()
	for i, k := range keys {
		types[i] = pipe.Type(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
	values := make([]redis.Cmder, len(keys))
	pipe = rdb.Pipeline()
	for i, k := range keys {
		switch types[i].Val() {
		case "zset":
			values[i] = pipe.ZRangeWithScores(ctx, k, 0, -1)
		case "hash":
			values[i] = pipe.HGetAll(ctx, k)
		case "stream":
			values[i] = pipe.XRange(ctx, k, "-", "+")
		default:
			values[i] = pipe.Get(ctx, k)
		}
	}
	_, _ = pipe.Exec(ctx)
	for i, k := range keys {
		var v strings.Builder
		switch c := values[i].(type) {
		case *redis.ZSliceCmd:
			for _, z := range c.Val() {
				v.WriteString(z.Member.(string) + "=" + time.UnixMilli(int64(z.Score)).String() + ";")
			}
		case *redis.MapStringStringCmd:
			m := c.Val()
			fields := make([]string, 0, len(m))
			for f := range m {
				fields = append(fields, f)
			}
			sort.Strings(fields)
			for _, f := range fields {
				v.WriteString(f + "=" + m[f] + ";")
			}
		case *redis.XMessageSliceCmd:
			for _, e := range c.Val() {
				v.WriteString(e.ID + ";")
			}
		case *redis.StringCmd:
			v.WriteString(c.Val())
		}
		out[k] = types[i].Val() + ":" + v.String()
	}
	return out
}

// newTestSet opens a set with a fake clock and a unique name.
func newTestSet(t testing.TB, b backend, opts ...OpenOption) (*Set, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	s, err := Open(context.Background(), b.rdb, uniqueName(t, b.rdb), append([]OpenOption{WithClock(clk.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// client returns a new client of the backend, closed when t ends (a second
// process's connection, say).
func (b backend) client(t testing.TB) redis.UniversalClient {
	t.Helper()
	switch b.name {
	case "miniredis":
		c := redis.NewClient(&redis.Options{Addr: b.mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	case "redis":
		return redistest.Client(t)
	}
	return redistest.SharedCluster(t).Client(t)
}

// newSweeper returns NewSweeper(s, opts...), failing the test on an error.
func newSweeper(t testing.TB, s *Set, opts ...SweeperOption) *Sweeper {
	t.Helper()
	w, err := NewSweeper(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// concurrently calls fn(0) to fn(n-1) from 8 goroutines, for tests that
// write many keys that do not depend on one another: their round trips
// overlap instead of adding up. It fails t with the first error once all
// have returned (a goroutine stops at its first error).
func concurrently(t testing.TB, n int, fn func(i int) error) {
	t.Helper()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(8, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("call %d: %w", i, err))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed, the first: %v", len(errs), errs[0])
	}
}

// The store's names the tests use often.
var (
	metaKey      = store.MetaKey
	newShardKeys = store.NewKeys
)

// ttlBucket is the scripts' TTL_BUCKET.
const ttlBucket = store.TTLBucket

// shardKeys are one shard's keys.
type shardKeys = store.Keys
