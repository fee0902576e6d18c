package bench

import (
	"context"
	"flag"
	"strconv"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

var (
	sweepOwners = flag.Int("sweep-owners", 100_000, "BenchmarkSweep: owners in the set (the target case is 1000000)")
	sweepDuePct = flag.Float64("sweep-due-pct", 1, "BenchmarkSweep: percent of the owners with an expired member")
)

// BenchmarkSweep drains a set where -sweep-due-pct (1%) of -sweep-owners
// (100,000; run with -sweep-owners 1000000 for the target case) owners hold
// one expired member each and the rest one live member, and reports the
// members reclaimed per second and the time to drain (ms/drain), for:
//
//   - sweeper+events: expset's Sweeper on a set WithExpiryEvents (one stream
//     entry per member);
//   - sweeper: the Sweeper on a set WithSweepIndex, no events;
//   - scan: the usual alternative, SCAN over every owner key and a
//     pipelined ZREMRANGEBYSCORE on each page (no events, no index).
//
// The sweeper visits only the due owners; SCAN visits them all, so the gap
// grows with the owners that have nothing due. Each iteration re-seeds the
// expired members (untimed).
func BenchmarkSweep(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		owners := *sweepOwners
		if !srv.real {
			owners = min(owners, 2000)
		}
		due := max(1, int(float64(owners)**sweepDuePct/100))
		for _, c := range []struct {
			name string
			opts []expset.OpenOption
			scan bool
		}{
			{"sweeper+events", []expset.OpenOption{expset.WithExpiryEvents()}, false},
			{"sweeper", []expset.OpenOption{expset.WithSweepIndex()}, false},
			{"scan", nil, true},
		} {
			b.Run(c.name+"/owners="+strconv.Itoa(owners), func(b *testing.B) {
				ctx := context.Background()
				name := "bench-sweep-" + uniqueTag()
				s, err := expset.Open(ctx, srv.rdb, name, c.opts...)
				fatalIf(b, err, "open")
				defer func() { _, _ = expset.Drop(ctx, srv.rdb, name) }()
				now := time.Now()
				seedOwners(b, srv.rdb, s, owners-due, "live-", now.Add(time.Hour), !c.scan)
				total := 0
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					seedOwners(b, srv.rdb, s, due, "due-", time.Now().Add(-time.Second), !c.scan)
					b.StartTimer()
					var n int
					if c.scan {
						n = scanSweep(b, srv.rdb, s)
					} else {
						w, err := expset.NewSweeper(s)
						fatalIf(b, err, "sweeper")
						st, err := w.SweepOnce(ctx)
						fatalIf(b, err, "sweep")
						n = st.Expired
					}
					if n != due {
						b.Fatalf("swept %d members, want %d", n, due)
					}
					total += n
				}
				b.StopTimer()
				b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "members/s")
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/drain")
			})
		}
	})
}

// seedOwners writes n owners (prefix0..) holding one member "m" with
// deadline d straight into the documented key layout, with their due-index
// entries when indexed, pipelined.
func seedOwners(b *testing.B, rdb redis.UniversalClient, s *expset.Set, n int, prefix string, d time.Time, indexed bool) {
	b.Helper()
	ctx := context.Background()
	score := float64(d.UnixMilli())
	pipe := rdb.Pipeline()
	for i := 0; i < n; i++ {
		o := prefix + strconv.Itoa(i)
		pipe.ZAdd(ctx, s.OwnerKey(o), redis.Z{Score: score, Member: "m"})
		if indexed {
			pipe.ZAdd(ctx, dueKey(s, s.ShardOf(o)), redis.Z{Score: score, Member: o})
		}
		if pipe.Len() >= 5000 {
			_, err := pipe.Exec(ctx)
			fatalIf(b, err, "seed")
		}
	}
	_, err := pipe.Exec(ctx)
	fatalIf(b, err, "seed")
}

// scanSweep is the naive sweeper: SCAN every owner key of the set, due or
// not, and ZREMRANGEBYSCORE each, a page at a time.
func scanSweep(b *testing.B, rdb redis.UniversalClient, s *expset.Set) int {
	ctx := context.Background()
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	total := 0
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "expset:{"+s.Name()+":*}:o:*", 1000).Result()
		fatalIf(b, err, "scan")
		if len(keys) > 0 {
			pipe := rdb.Pipeline()
			cmds := make([]*redis.IntCmd, len(keys))
			for i, k := range keys {
				cmds[i] = pipe.ZRemRangeByScore(ctx, k, "-inf", now)
			}
			_, err := pipe.Exec(ctx)
			fatalIf(b, err, "zremrangebyscore")
			for _, c := range cmds {
				total += int(c.Val())
			}
		}
		if cursor = next; cursor == 0 {
			return total
		}
	}
}
