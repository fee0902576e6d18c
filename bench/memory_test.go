package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// memoryCases are the members per owner measured, with enough owners that
// each of the 16 shards' due index holds more than 128 entries (past
// listpack, as in production) at 3 per owner.
var memoryCases = []struct{ perOwner, owners int }{
	{3, 4000},
	{100, 100},
	{1000, 10},
}

// BenchmarkMemory reports the bytes each pending member costs, for a default
// set (no due index) and one WithExpiryEvents (which keeps it): MEMORY USAGE
// (SAMPLES 0, exact) over every owner key plus the shards' due indexes,
// divided by the members, beside a bare sorted set per owner holding the
// same members and deadlines with a key TTL. Metrics: B/member (expset,
// bookkeeping included), B/member-bare, B/member-index (the due indexes'
// share of B/member). The timed loop is MEMORY USAGE of one owner key per
// op; the metrics are what matters. Real Redis only: miniredis has no
// MEMORY USAGE.
func BenchmarkMemory(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		if !srv.real {
			b.Skip("MEMORY USAGE is real Redis only")
		}
		for _, events := range []bool{false, true} {
			mode := "default"
			if events {
				mode = "events"
			}
			for _, c := range memoryCases {
				b.Run(mode+"/per-owner="+strconv.Itoa(c.perOwner), func(b *testing.B) {
					runMemory(b, srv, c.perOwner, c.owners, events)
				})
			}
		}
	})
}

func runMemory(b *testing.B, srv server, perOwner, nOwners int, events bool) {
	ctx := context.Background()
	const ttl = time.Hour
	tag := uniqueTag("mem")
	var opts []expset.OpenOption
	if events {
		opts = append(opts, expset.WithExpiryEvents())
	}
	a, err := openLibrary(ctx, srv.rdb, tag, perOwner, opts...)
	fatalIf(b, err, "open")
	l := a.(*library)
	bare := &plain{rdb: srv.rdb, prefix: "bench:" + tag + ":"}
	defer func() {
		fatalIf(b, l.cleanup(ctx), "cleanup")
		fatalIf(b, bare.cleanup(ctx), "cleanup")
	}()
	// Realistic IDs: owners "user-<n>", members "order-<n>" of 12 bytes.
	owners := names("user-", nOwners)
	for m := 0; m < perOwner; m++ {
		member := fmt.Sprintf("order-%06d", m)
		fatalIf(b, l.seed(ctx, owners, member, ttl), "seed expset")
		fatalIf(b, bare.seed(ctx, owners, member, ttl), "seed bare")
	}
	s := l.s
	members := float64(perOwner * nOwners)
	var ownerBytes, bareBytes, indexBytes int64
	for _, o := range owners {
		ownerBytes += memoryUsage(ctx, b, srv.rdb, s.OwnerKey(o))
		bareBytes += memoryUsage(ctx, b, srv.rdb, bare.prefix+o)
	}
	indexed := 0
	for shard := 0; shard < s.Shards(); shard++ {
		if n := int(srv.rdb.ZCard(ctx, dueKey(s, shard)).Val()); n > 0 {
			indexed += n
			indexBytes += memoryUsage(ctx, b, srv.rdb, dueKey(s, shard))
		}
	}
	want := 0 // without events (and WithSweepIndex) a set keeps no due index
	if events {
		want = nOwners
	}
	if indexed != want {
		b.Fatalf("the due indexes hold %d owners, want %d: the key layout changed?", indexed, want)
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		memoryUsage(ctx, b, srv.rdb, s.OwnerKey(owners[i%len(owners)]))
	}
	b.StopTimer()
	b.ReportMetric(float64(ownerBytes+indexBytes)/members, "B/member")
	b.ReportMetric(float64(bareBytes)/members, "B/member-bare")
	b.ReportMetric(float64(indexBytes)/members, "B/member-index")
}

// dueKey is shard's due index, as docs/design.md's key layout names it.
func dueKey(s *expset.Set, shard int) string {
	return "expset:{" + s.Name() + ":" + strconv.Itoa(shard) + "}:due"
}

func memoryUsage(ctx context.Context, b *testing.B, rdb redis.UniversalClient, key string) int64 {
	n, err := rdb.MemoryUsage(ctx, key, 0).Result()
	if err != nil {
		b.Fatalf("MEMORY USAGE %s: %v", key, err)
	}
	return n
}

// jobMemoryJobs is how many jobs BenchmarkJobMemory puts.
const jobMemoryJobs = 100_000

// BenchmarkJobMemory reports the bytes each pending job of Set.Put costs
// beyond its payload, with 100,000 jobs of 16-byte IDs on a default set
// (16 shards) WithExpiryEvents and WithPayloadStorage, for payloads of 0,
// 32 and 200 bytes (and 200 on a server whose hash-max-listpack-value is
// 256 instead of 64): MEMORY USAGE (SAMPLES 0, exact) over every key of the
// set (the buckets' sorted sets and payload hashes, the due indexes; no
// event is written, as no job is due), minus the payloads' bytes, divided
// by the jobs (B/job). The timed loop is one Set.Job of a waiting job per
// op. Real Redis only: miniredis has no MEMORY USAGE.
func BenchmarkJobMemory(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		if !srv.real {
			b.Skip("MEMORY USAGE is real Redis only")
		}
		for _, size := range []int{0, 32, 200} {
			b.Run("payload="+strconv.Itoa(size), func(b *testing.B) { runJobMemory(b, srv, size) })
		}
		// A payload over hash-max-listpack-value (64 bytes by default)
		// makes its bucket's hash a hashtable; a server allowed longer
		// values keeps it compact.
		ctx := context.Background()
		old, err := srv.rdb.ConfigGet(ctx, "hash-max-listpack-value").Result()
		fatalIf(b, err, "config get")
		fatalIf(b, srv.rdb.ConfigSet(ctx, "hash-max-listpack-value", "256").Err(), "config set")
		defer func() {
			fatalIf(b, srv.rdb.ConfigSet(ctx, "hash-max-listpack-value", old["hash-max-listpack-value"]).Err(), "config set")
		}()
		b.Run("payload=200/hash-max-listpack-value=256", func(b *testing.B) { runJobMemory(b, srv, 200) })
	})
}

func runJobMemory(b *testing.B, srv server, size int) {
	ctx := context.Background()
	name := uniqueTag("jobs")
	s, err := expset.Open(ctx, srv.rdb, name, expset.WithExpiryEvents(), expset.WithPayloadStorage())
	fatalIf(b, err, "open")
	defer func() {
		_, err := expset.Drop(ctx, srv.rdb, name)
		fatalIf(b, err, "drop")
	}()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	ids := make(chan string)
	errs := make(chan error, goroutines)
	for range goroutines {
		go func() {
			var first error
			for id := range ids {
				var opts []expset.AddOption
				if size > 0 {
					opts = append(opts, expset.WithPayload(payload))
				}
				if _, put, err := s.Put(ctx, id, time.Hour, opts...); (err != nil || !put) && first == nil {
					first = fmt.Errorf("put %s: %v %w", id, put, err)
				}
			}
			errs <- first
		}()
	}
	for i := range jobMemoryJobs {
		ids <- fmt.Sprintf("job-%012d", i) // 16 bytes
	}
	close(ids)
	for range goroutines {
		fatalIf(b, <-errs, "put")
	}
	var total int64
	var keys int
	iter := srv.rdb.Scan(ctx, 0, "expset:{"+name+":*", 1000).Iterator()
	for iter.Next(ctx) {
		total += memoryUsage(ctx, b, srv.rdb, iter.Val())
		keys++
	}
	fatalIf(b, iter.Err(), "scan")

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Job(ctx, fmt.Sprintf("job-%012d", i%jobMemoryJobs)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(total-int64(size)*jobMemoryJobs)/jobMemoryJobs, "B/job")
	b.ReportMetric(float64(keys), "keys")
}
