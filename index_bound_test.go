package expset

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/store"
)

// TestSweepIndexBoundedWithoutSweeper: a set WithSweepIndex and no sweeper.
// 2010 owners (300 on miniredis) expire (their keys go by their key TTL); their index entries
// do not stay for good. Writes that file new owners remove the entries stale
// past indexGrace, two per write, so the index does not grow while the set
// is in use; and the index key carries a TTL reaching no further than the
// latest deadline filed in it plus indexGrace, so once writes stop it goes.
func TestSweepIndexBoundedWithoutSweeper(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithSweepIndex())
		ctx := context.Background()
		due := s.shards[0].Due
		// 2010 as found; fewer on miniredis, whose Lua is slow (the
		// behaviour is the same).
		n := 2010
		if b.mr != nil {
			n = 300
		}
		concurrently(t, n, func(i int) error {
			_, err := s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Second)
			return err
		})
		pttl := must[time.Duration](t)(b.rdb.PTTL(ctx, due).Result())
		if pttl <= 0 || pttl > time.Second+indexGrace {
			t.Fatalf("index key TTL %v, want one reaching at most 1s + %v", pttl, indexGrace)
		}
		// The set stays in use: past the grace, each new owner's write (Add
		// or Acquire) removes two stale entries.
		clk.Advance(indexGrace + 2*time.Second)
		q := must[*Quota](t)(NewQuota(s, 3))
		concurrently(t, n, func(i int) error {
			if i%2 == 0 {
				_, err := s.Add(ctx, "n"+strconv.Itoa(i), "m", time.Second)
				return err
			}
			d, err := q.Acquire(ctx, "n"+strconv.Itoa(i), "m", time.Second)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("acquire: %+v", d)
			}
			return err
		})
		left := b.rdb.ZRange(ctx, due, 0, -1).Val()
		stale := 0
		for _, o := range left {
			if strings.HasPrefix(o, "o") {
				stale++
			}
		}
		if len(left) != n || stale != 0 {
			t.Fatalf("index holds %d entries, %d of owners expired past the grace; want the %d new ones", len(left), stale, n)
		}
		if b.mr != nil {
			// Only miniredis moves key TTLs: past every deadline the entries
			// stay for the grace, then the index key is gone with the owners.
			b.mr.FastForward(2 * time.Second)
			if got := b.rdb.ZCard(ctx, due).Val(); got != int64(n) {
				t.Fatalf("index emptied before the grace: %d left", got)
			}
			b.mr.FastForward(indexGrace)
			if b.rdb.Exists(ctx, due).Val() != 0 {
				t.Fatalf("index key outlived its owners by more than %v: %d entries", indexGrace, b.rdb.ZCard(ctx, due).Val())
			}
		}
	})
}

// TestEventsIndexNeverExpires: with expiry events the due index is how the
// sweeper finds every expiry: it carries no TTL and writes remove nothing
// from it, however stale.
func TestEventsIndexNeverExpires(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		ctx := context.Background()
		for i := range 10 {
			must[time.Time](t)(s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Second))
		}
		clk.Advance(indexGrace + 2*time.Second)
		must[time.Time](t)(s.Add(ctx, "late", "m", time.Second))
		due := s.shards[0].Due
		if n, ttl := indexLen(t, b.rdb, due), b.rdb.PTTL(ctx, due).Val(); n != 11 || ttl != -1 {
			t.Fatalf("index of an events set: %d owners, TTL %v; want 11 and none", n, ttl)
		}
		if score, err := b.rdb.ZScore(ctx, due, store.IndexAnchor).Result(); err != nil || !math.IsInf(score, 1) {
			t.Fatalf("the index's anchor: %v %v, want it at +inf", score, err)
		}
	})
}

// TestIndexGraceMatchesPrelude: the Go constant and the scripts' agree.
func TestIndexGraceMatchesPrelude(t *testing.T) {
	t.Parallel()
	want := "local INDEX_GRACE = " + strconv.FormatInt(indexGrace.Milliseconds(), 10) + "\n"
	if src := store.Source("lib.lua"); !strings.Contains(src, want) {
		t.Fatalf("lua/lib.lua lacks %q", want)
	}
}

// TestSweepKeepsTheIndexAlive: an owner the sweeper re-files under a later
// deadline keeps the index key alive past that deadline plus indexGrace, so
// the index TTL never drops an owner a running sweeper still tracks.
func TestSweepKeepsTheIndexAlive(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithSweepIndex())
		ctx := context.Background()
		must[time.Time](t)(s.Add(ctx, "u", "soon", time.Second))
		must[time.Time](t)(s.Add(ctx, "u", "later", 3*time.Hour))
		due := s.shards[0].Due
		if ttl := b.rdb.PTTL(ctx, due).Val(); ttl > time.Second+indexGrace {
			t.Fatalf("index TTL %v before the sweep, want at most 1s + %v", ttl, indexGrace)
		}
		clk.Advance(2 * time.Second)
		if st := must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx)); st.Expired != 1 {
			t.Fatalf("sweep: %+v", st)
		}
		if ttl := b.rdb.PTTL(ctx, due).Val(); ttl < 3*time.Hour-2*time.Second+indexGrace-time.Minute {
			t.Fatalf("index TTL %v after re-filing u at +3h, want about 3h + %v", ttl, indexGrace)
		}
		if got := indexOf(t, s); len(got) != 1 {
			t.Fatalf("index %v, want u alone", got)
		}
	})
}

// indexOf returns the due index of every shard: owner -> score, without
// the anchor (store.IndexAnchor).
func indexOf(t *testing.T, s *Set) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, sk := range s.shards {
		zs, err := s.rdb.ZRangeWithScores(context.Background(), sk.Due, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range zs {
			if z.Member != store.IndexAnchor {
				out[z.Member.(string)] = int64(z.Score)
			}
		}
	}
	return out
}

// indexLen counts the owners in due index key: its entries but the anchor
// (store.IndexAnchor, at +inf). (miniredis counts +inf in a ZCOUNT to
// "(+inf".)
func indexLen(t *testing.T, rdb redis.Cmdable, key string) int64 {
	t.Helper()
	ctx := context.Background()
	n, err := rdb.ZCard(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.ZScore(ctx, key, store.IndexAnchor).Result(); err == nil {
		n--
	} else if !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}
