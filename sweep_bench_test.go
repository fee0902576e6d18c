package expset

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Benchmark shape: expiredOwners owners hold membersPerOwner expired members
// each, beside liveOwners owners holding one live member each.
const (
	benchExpiredOwners   = 1000
	benchMembersPerOwner = 10
	benchLiveOwners      = 20000
)

// BenchmarkSweep sweeps benchExpiredOwners*benchMembersPerOwner expired
// members spread over many owners, among benchLiveOwners owners with nothing
// due, on the real server, and reports members reclaimed per second:
//
//   - index: the Sweeper, which visits only the owners the due index lists;
//   - index+events: the same, writing one stream entry per member;
//   - scan: a naive sweeper that SCANs every owner key and runs
//     ZREMRANGEBYSCORE on each (no events, no index upkeep), pipelined per
//     SCAN page.
//
// go test -run '^$' -bench BenchmarkSweep -benchtime 5x
func BenchmarkSweep(b *testing.B) {
	rdb := redistest.Client(b)
	for _, c := range []struct {
		name   string
		events bool
		sweep  func(b *testing.B, s *Set) int
	}{
		{"index", false, indexSweep},
		{"index+events", true, indexSweep},
		{"scan", false, scanSweep},
	} {
		b.Run(c.name, func(b *testing.B) {
			clk := newFakeClock()
			opts := []OpenOption{WithClock(clk.Now), WithSweepIndex()}
			if c.events {
				opts = append(opts, WithExpiryEvents())
			}
			s, err := Open(context.Background(), rdb, uniqueName(b, rdb), opts...)
			if err != nil {
				b.Fatal(err)
			}
			seedBench(b, s, clk.Now(), benchLiveOwners, 1, time.Hour, "live")
			b.ReportAllocs()
			b.ResetTimer()
			total := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for _, sk := range s.shards {
					rdb.Del(context.Background(), sk.Events)
				}
				seedBench(b, s, clk.Now(), benchExpiredOwners, benchMembersPerOwner, -time.Second, "gone")
				b.StartTimer()
				n := c.sweep(b, s)
				if n != benchExpiredOwners*benchMembersPerOwner {
					b.Fatalf("swept %d, want %d", n, benchExpiredOwners*benchMembersPerOwner)
				}
				total += n
			}
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "members/s")
		})
	}
}

func indexSweep(b *testing.B, s *Set) int {
	st, err := newSweeper(b, s).SweepOnce(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return st.Expired
}

// scanSweep is the naive sweeper: every owner key of the set, whether or not
// anything in it is due.
func scanSweep(b *testing.B, s *Set) int {
	ctx := context.Background()
	now := "" // the scripts' ARGV[1]: the injected clock, or "" for the server's
	if s.clock != nil {
		now = strconv.FormatInt(s.clock().UnixMilli(), 10)
	}
	total := 0
	for _, sk := range s.shards {
		var cursor uint64
		for {
			keys, next, err := s.rdb.Scan(ctx, cursor, sk.Owner+"*", 1000).Result()
			if err != nil {
				b.Fatal(err)
			}
			pipe := s.rdb.Pipeline()
			cmds := make([]*redis.IntCmd, len(keys))
			for i, k := range keys {
				cmds[i] = pipe.ZRemRangeByScore(ctx, k, "-inf", now)
			}
			if _, err := pipe.Exec(ctx); err != nil && len(keys) > 0 {
				b.Fatal(err)
			}
			for _, c := range cmds {
				total += int(c.Val())
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return total
}

// seedBench writes owners owners (named prefix0..) with per members each at
// deadline now+offset straight into the key layout, with their index
// entries, pipelined.
func seedBench(b *testing.B, s *Set, now time.Time, owners, per int, offset time.Duration, prefix string) {
	b.Helper()
	ctx := context.Background()
	d := float64(now.Add(offset).UnixMilli())
	pipe := s.rdb.Pipeline()
	for i := 0; i < owners; i++ {
		o := prefix + strconv.Itoa(i)
		sk := &s.shards[s.ShardOf(o)]
		zs := make([]redis.Z, per)
		for j := range zs {
			zs[j] = redis.Z{Score: d, Member: "m" + strconv.Itoa(j)}
		}
		pipe.ZAdd(ctx, sk.Owner+o, zs...)
		pipe.ZAdd(ctx, sk.Due, redis.Z{Score: d, Member: o})
		if pipe.Len() >= 2000 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
}
