package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/expset/expset/internal/redistest"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLayoutMemory measures key layouts the library does not use,
// beside the one it does, written with plain commands on a redis-server of
// its own (emptied before each case): what a layout change would save
// before anyone builds it. Key names are the library's (a set name as long
// as the other benchmarks'), deadlines an hour ahead spread over a minute,
// and every figure is MEMORY USAGE (SAMPLES 0, exact) summed over the
// case's keys, per job beyond its payload or per member.
//
// Jobs (-job-memory-jobs of them, 16-byte IDs, 64-byte payloads, 16
// shards, each bucket's entry in its shard's due index, the index's anchor
// included):
//   - jobs/zset+hash: the library's layout: a bucket's sorted set of IDs
//     by deadline and its hash of payloads by ID;
//   - jobs/hash: one hash a bucket, ID to the deadline's 13 digits and the
//     payload;
//   - jobs/zset-member: one sorted set a bucket, the ID, a zero byte and
//     the payload as the member, by deadline;
//
// each at buckets=8192 (the library's) and 4096.
//
// Members (4,000 and 64,000 owners of 3 members of 12 bytes, 16 shards, a
// set with events):
//   - members/index: the library's layout: each owner's sorted set, and the
//     owner in its shard's due index (a skip list: the anchor);
//   - members/index-of-buckets/per-shard=N: the owners of a shard spread
//     over N sorted sets (by a hash of the owner), each such bucket in the
//     shard's index at its earliest deadline.
//
// Real Redis only: miniredis has no MEMORY USAGE.
func BenchmarkLayoutMemory(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		if !srv.real {
			b.Skip("MEMORY USAGE is real Redis only")
		}
		own := redistest.Start(b)
		rdb := redis.NewClient(&redis.Options{Addr: own.Addr})
		defer func() { _ = rdb.Close() }()
		for _, layout := range []string{"zset+hash", "hash", "zset-member"} {
			for _, buckets := range []int{8192, 4096} {
				b.Run(fmt.Sprintf("jobs/%s/buckets=%d", layout, buckets), func(b *testing.B) {
					runLayoutJobs(b, rdb, layout, buckets, *jobMemoryJobs)
				})
			}
		}
		for _, owners := range []int{4000, 64000} {
			name := fmt.Sprintf("members/owners=%d/", owners)
			b.Run(name+"index", func(b *testing.B) { runLayoutMembers(b, rdb, owners, 0) })
			for _, n := range []int{4, 16, 64} {
				b.Run(fmt.Sprintf("%sindex-of-buckets/per-shard=%d", name, n), func(b *testing.B) { runLayoutMembers(b, rdb, owners, n) })
			}
		}
	})
}

const layoutShards = 16

// layoutTag is a set name as long as uniqueTag's in the other benchmarks.
const layoutTag = "1q2w3e-17-jobs"

// layoutDeadline is the i-th deadline of a case: an hour ahead of a fixed
// time, spread over a minute.
func layoutDeadline(i int) int64 { return 1_800_000_000_000 + 3_600_000 + int64(i%60_000) }

func runLayoutJobs(b *testing.B, rdb *redis.Client, layout string, buckets, jobs int) {
	payload := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 3)[:64]
	total := writeLayout(b, rdb, func(ctx context.Context, keys []store.Keys, pipe redis.Pipeliner, next func()) {
		earliest := map[int]int64{}
		for i := range jobs {
			id := fmt.Sprintf("job-%012d", i)
			h := store.FNV32(id) // the library's mapping (internal/store/jobs.go)
			k := &keys[h%layoutShards]
			bucket := int(h%layoutShards)<<20 | int((h/layoutShards)%uint32(buckets/layoutShards))
			owner := store.JobOwnerPrefix + strconv.Itoa(bucket&(1<<20-1))
			d := layoutDeadline(i)
			switch layout {
			case "zset+hash":
				pipe.ZAdd(ctx, k.OwnerKey(owner), redis.Z{Score: float64(d), Member: id})
				pipe.HSet(ctx, k.PayloadKey(owner), id, payload)
			case "hash":
				pipe.HSet(ctx, k.OwnerKey(owner), id, strconv.FormatInt(d, 10)+payload)
			case "zset-member":
				pipe.ZAdd(ctx, k.OwnerKey(owner), redis.Z{Score: float64(d), Member: id + "\x00" + payload})
			}
			if e, ok := earliest[bucket]; !ok || d < e {
				earliest[bucket] = d
				pipe.ZAdd(ctx, k.Due, redis.Z{Score: float64(d), Member: owner})
			}
			next()
		}
	})
	b.ReportMetric(float64(total-int64(len(payload))*int64(jobs))/float64(jobs), "B/job")
}

func runLayoutMembers(b *testing.B, rdb *redis.Client, owners, buckets int) {
	const perOwner = 3
	total := writeLayout(b, rdb, func(ctx context.Context, keys []store.Keys, pipe redis.Pipeliner, next func()) {
		earliest := map[string]int64{}
		for o := range owners {
			owner := "user-" + strconv.Itoa(o)
			k := &keys[store.ShardOf(owner, layoutShards)]
			first := layoutDeadline(o * perOwner)
			for m := range perOwner {
				pipe.ZAdd(ctx, k.OwnerKey(owner), redis.Z{Score: float64(layoutDeadline(o*perOwner + m)), Member: fmt.Sprintf("order-%06d", m)})
			}
			if buckets == 0 {
				pipe.ZAdd(ctx, k.Due, redis.Z{Score: float64(first), Member: owner})
				next()
				continue
			}
			bucket := k.Due + ":" + strconv.Itoa(int(store.FNV32(owner)/layoutShards)%buckets)
			pipe.ZAdd(ctx, bucket, redis.Z{Score: float64(first), Member: owner})
			if e, ok := earliest[bucket]; !ok || first < e {
				earliest[bucket] = first
				pipe.ZAdd(ctx, k.Due, redis.Z{Score: float64(first), Member: bucket[len(k.Due):]})
			}
			next()
		}
	})
	b.ReportMetric(float64(total)/float64(owners*perOwner), "B/member")
}

// writeLayout empties rdb's server, files the index anchor in each shard's
// due index, has write queue a case's commands on a pipeline (calling next
// after each item: the pipeline goes from 1,000 commands) and returns what keyspaceUsage sums. The timed loop is
// MEMORY USAGE of shard 0's due index.
func writeLayout(b *testing.B, rdb *redis.Client, write func(ctx context.Context, keys []store.Keys, pipe redis.Pipeliner, next func())) int64 {
	ctx := context.Background()
	fatalIf(b, rdb.FlushAll(ctx).Err(), "flushall")
	keys := make([]store.Keys, layoutShards)
	for s := range keys {
		keys[s] = store.NewKeys(layoutTag, s)
		fatalIf(b, rdb.ZAdd(ctx, keys[s].Due, redis.Z{Score: math.Inf(1), Member: store.IndexAnchor}).Err(), "anchor")
	}
	pipe := rdb.Pipeline()
	send := func() {
		_, err := pipe.Exec(ctx)
		fatalIf(b, err, "write")
	}
	write(ctx, keys, pipe, func() {
		if pipe.Len() >= 1000 {
			send()
		}
	})
	send()
	total := keyspaceUsage(ctx, b, rdb)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		memoryUsage(ctx, b, rdb, keys[0].Due)
	}
	b.StopTimer()
	return total
}

// keyspaceUsage sums MEMORY USAGE (SAMPLES 0) over every key of rdb's
// server.
func keyspaceUsage(ctx context.Context, b *testing.B, rdb *redis.Client) int64 {
	var total int64
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		fatalIf(b, err, "scan")
		pipe := rdb.Pipeline()
		usage := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			usage[i] = pipe.MemoryUsage(ctx, k, 0)
		}
		_, err = pipe.Exec(ctx)
		fatalIf(b, err, "memory usage")
		for _, u := range usage {
			total += u.Val()
		}
		if cursor = next; cursor == 0 {
			return total
		}
	}
}
