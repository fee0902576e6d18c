package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// A workload is one path measured: prep seeds the server (not counted) and
// returns the job whose server instructions are counted.
type workload struct {
	name string // "acquire/fresh", "recipe/straightforward/fresh", ...
	unit string // what the count is divided by: "call", "member", "request"
	// vs names the workload whose count this one is divided by in the
	// tables ("" for none).
	vs string
	// state names the owner state ("fresh", "live", "retry", "denied") of
	// an acquire: the tables also divide by the straightforward script's
	// count in that state.
	state string
	what  string
	prep  func(ctx context.Context, e *env) (job, error)
}

// A job is calls calls of do (i from 0 to calls-1), made by env.goroutines
// goroutines at once; the instructions counted are divided by units.
type job struct {
	calls int
	units int
	do    func(ctx context.Context, i int) error
}

// env is what every workload shares: the client, the size of a run and the
// directory of the Lua copies.
type env struct {
	rdb        *redis.Client
	n          int
	goroutines int
	testdata   string
	owners     []string
	members    []string
}

const (
	setName = "bench"
	limit   = 3
)

// ttl is the TTL of every member written (-ttl).
var ttl = time.Minute

func newEnv(rdb *redis.Client, n, goroutines int, testdata string) *env {
	e := &env{rdb: rdb, n: n, goroutines: goroutines, testdata: testdata}
	e.owners = make([]string, n)
	e.members = make([]string, n)
	for i := range e.owners {
		e.owners[i] = "user-" + strconv.Itoa(i)
		e.members[i] = "order-" + strconv.Itoa(i)
	}
	return e
}

// script returns a redis.Script of the Lua file at path, relative to the
// testdata directory.
func (e *env) script(path string) (*redis.Script, error) {
	src, err := e.source(path)
	if err != nil {
		return nil, err
	}
	return newScript(src), nil
}

func (e *env) source(path string) (string, error) {
	b, err := os.ReadFile(filepath.Join(e.testdata, path))
	return string(b), err
}

// scripts are the scripts servercost made (newScript): with the library's,
// each is loaded before a workload's counters are zeroed, so a count holds
// no script's compilation (once per server, not per call).
var scripts []*redis.Script

// newScript returns redis.NewScript(src), kept in scripts.
func newScript(src string) *redis.Script {
	sc := redis.NewScript(src)
	scripts = append(scripts, sc)
	return sc
}

// loadScripts loads the library's scripts and servercost's own.
func loadScripts(ctx context.Context, rdb *redis.Client) error {
	for _, sc := range append(store.All(), scripts...) {
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("SCRIPT LOAD: %w", err)
		}
	}
	return nil
}

// measure counts the server instructions of one workload: the keyspace is
// emptied, the workload seeded, the counters zeroed, the job run and the
// counters dumped (and the dump copied to keep, unless empty). It returns
// instructions per unit.
func measure(ctx context.Context, srv *counted, e *env, w workload, keep string) (float64, string, error) {
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		return 0, "", err
	}
	j, err := w.prep(ctx, e)
	if err != nil {
		return 0, "", fmt.Errorf("%s: prepare: %w", w.name, err)
	}
	// Hand freed memory back to the system now: jemalloc otherwise purges
	// it on later allocations, on a timer, which would move instructions
	// into the counted part by chance (most visible on raw ZADD).
	if err := e.rdb.Do(ctx, "MEMORY", "PURGE").Err(); err != nil {
		return 0, "", err
	}
	if err := loadScripts(ctx, e.rdb); err != nil {
		return 0, "", err
	}
	if err := e.rdb.ConfigResetStat(ctx).Err(); err != nil {
		return 0, "", err
	}
	if err := srv.zero(); err != nil {
		return 0, "", err
	}
	if err := run(ctx, e.goroutines, j); err != nil {
		return 0, "", fmt.Errorf("%s: %w", w.name, err)
	}
	total, err := srv.dump(keep)
	if err != nil {
		return 0, "", err
	}
	stats, err := commandsPer(ctx, e.rdb, j.units)
	if err != nil {
		return 0, "", err
	}
	return float64(total) / float64(j.units), stats, nil
}

// commandsPer returns the commands the server ran since CONFIG RESETSTAT,
// those scripts ran included, per unit of units, most first: "evalsha
// 2.00, xack 1.00, ..." (INFO and CONFIG themselves left out).
func commandsPer(ctx context.Context, rdb *redis.Client, units int) (string, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return "", err
	}
	type count struct {
		name  string
		calls int64
	}
	var cs []count
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return "", fmt.Errorf("INFO commandstats: %q: %w", line, err)
		}
		cs = append(cs, count{name, n})
	}
	sort.Slice(cs, func(i, j int) bool {
		return cs[i].calls > cs[j].calls || cs[i].calls == cs[j].calls && cs[i].name < cs[j].name
	})
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s %.2f", c.name, float64(c.calls)/float64(units))
	}
	return strings.Join(parts, ", "), nil
}

// run makes j's calls from goroutines goroutines, each taking the next
// call number, and returns the first error.
func run(ctx context.Context, goroutines int, j job) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(goroutines, j.calls) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= j.calls || first.Load() != nil {
					return
				}
				if err := j.do(ctx, i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// ttlBucket is the library's TTL bucket in ms (internal/store/lua/prelude.lua's
// TTL_BUCKET): the owner key of a set without events expires at the end of
// its latest deadline's bucket.
const ttlBucket = 16384

// seed gives each owner the members with deadline d, written straight into
// the set's documented key layout, pipelined: with keyTTL a key TTL to the
// end of d's TTL bucket (as a set without events keeps), with index the
// owner's due-index entry.
func seed(ctx context.Context, rdb *redis.Client, s *expset.Set, owners []string, members []string, d time.Time, keyTTL, index bool) error {
	return seedOf(ctx, rdb, s, owners, func(int) []string { return members }, d, keyTTL, index)
}

// seedOf is seed with members of(i) for the i-th owner.
func seedOf(ctx context.Context, rdb *redis.Client, s *expset.Set, owners []string, of func(i int) []string, d time.Time, keyTTL, index bool) error {
	score := float64(d.UnixMilli())
	pipe := rdb.Pipeline()
	for i, o := range owners {
		key := s.OwnerKey(o)
		for _, m := range of(i) {
			pipe.ZAdd(ctx, key, redis.Z{Score: score, Member: m})
		}
		if keyTTL {
			pipe.PExpireAt(ctx, key, time.UnixMilli((d.UnixMilli()/ttlBucket+1)*ttlBucket))
		}
		if index {
			pipe.ZAdd(ctx, dueKey(s, o), redis.Z{Score: score, Member: o})
		}
		if pipe.Len() >= 5000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	_, err := pipe.Exec(ctx)
	return err
}

// dueKey returns the due index of owner's shard.
func dueKey(s *expset.Set, owner string) string {
	return shardPrefix(s, owner) + "due"
}

// shardPrefix returns "expset:{name:S}:" for owner's shard S.
func shardPrefix(s *expset.Set, owner string) string {
	return strings.TrimSuffix(s.OwnerKey(owner), "o:"+owner)
}

// seedExpired gives the first n/per owners per members each, expired a
// second ago, without key TTLs (a sweeper's work), and returns those owners.
func seedExpired(ctx context.Context, e *env, s *expset.Set, per int, index bool) ([]string, error) {
	members := make([]string, per)
	for i := range members {
		members[i] = "order-" + strconv.Itoa(i)
	}
	owners := e.owners[:e.n/per]
	return owners, seed(ctx, e.rdb, s, owners, members, time.Now().Add(-time.Second), false, index)
}
