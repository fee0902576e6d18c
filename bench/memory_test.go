package bench

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
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
		// (The count leaves out the index's anchor, store.IndexAnchor; its
		// bytes count.)
		if n := int(srv.rdb.ZCount(ctx, dueKey(s, shard), "-inf", "(+inf").Val()); n > 0 {
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

var jobMemoryJobs = flag.Int("job-memory-jobs", 100_000, "BenchmarkJobMemory: jobs put per case (1000000 for the large case)")

// jobMemorySizes are the payload sizes BenchmarkJobMemory measures: none,
// small, both sides of the server's hash-max-listpack-value (64 bytes by
// default) and larger ones.
var jobMemorySizes = []int{0, 32, 64, 65, 100, 200, 500, 1000, 4000}

// BenchmarkJobMemory reports the bytes each pending job of Set.Put costs
// beyond its payload, with -job-memory-jobs (100,000) jobs of 16-byte IDs
// on a default set (16 shards) WithExpiryEvents and WithPayloadStorage, for
// each of jobMemorySizes (and 200 bytes on a server whose
// hash-max-listpack-value is 256 instead of 64), on a redis-server of its
// own, emptied before each case. Two measures, each minus the payloads'
// bytes and divided by the jobs: B/job, MEMORY USAGE (SAMPLES 0, exact)
// summed over every key of the set (the buckets' sorted sets and payload
// hashes, the due indexes; no event is written, as no job is due); and
// B/job-used, what INFO's used_memory grew by, less the clients' buffers
// (mem_clients_normal): also the keyspace's own table and what the
// allocator rounds up that MEMORY USAGE leaves out, and the receipts of
// the Puts, which last a minute (jobReceiptMillis) and are left out of
// B/job: B/receipt is their MEMORY USAGE each. The timed loop is one
// Set.Job of a waiting job per op. Real Redis only: miniredis has no
// MEMORY USAGE.
func BenchmarkJobMemory(b *testing.B) {
	underServer(b, func(b *testing.B, srv server) {
		if !srv.real {
			b.Skip("MEMORY USAGE is real Redis only")
		}
		own := redistest.Start(b)
		rdb := redis.NewClient(&redis.Options{Addr: own.Addr, PoolSize: goroutines, MinIdleConns: goroutines})
		defer func() { _ = rdb.Close() }()
		// A first pass, not measured: the server's first run of it frees
		// memory of its start-up (about 1 MB) that would count against the
		// first case.
		putJobs(b, rdb, 0, min(*jobMemoryJobs, 10_000))
		for _, size := range jobMemorySizes {
			b.Run("payload="+strconv.Itoa(size), func(b *testing.B) { runJobMemory(b, rdb, size) })
		}
		// A payload over hash-max-listpack-value (64 bytes by default)
		// makes its bucket's hash a hashtable; a server allowed longer
		// values keeps it compact.
		fatalIf(b, rdb.ConfigSet(context.Background(), "hash-max-listpack-value", "256").Err(), "config set")
		b.Run("payload=200/hash-max-listpack-value=256", func(b *testing.B) { runJobMemory(b, rdb, 200) })
	})
}

func runJobMemory(b *testing.B, rdb *redis.Client, size int) {
	ctx := context.Background()
	jobs := *jobMemoryJobs
	s, used := putJobs(b, rdb, size, jobs)
	var total, receipts int64
	var keys, nreceipts int
	iter := rdb.Scan(ctx, 0, "expset:{"+s.Name()+":*", 1000).Iterator()
	for iter.Next(ctx) {
		n := memoryUsage(ctx, b, rdb, iter.Val())
		if strings.Contains(iter.Val(), "}:r:#") {
			receipts += n
			nreceipts++
			continue
		}
		total += n
		keys++
	}
	fatalIf(b, iter.Err(), "scan")

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Job(ctx, fmt.Sprintf("job-%012d", i%jobs)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	payloads := int64(size) * int64(jobs)
	b.ReportMetric(float64(total-payloads)/float64(jobs), "B/job")
	b.ReportMetric(float64(used-payloads)/float64(jobs), "B/job-used")
	b.ReportMetric(float64(keys), "keys")
	if nreceipts > 0 {
		b.ReportMetric(float64(receipts)/float64(nreceipts), "B/receipt")
	}
}

// putJobs empties the server (the benchmark's own: its keyspace's tables
// start small again), opens a set and puts jobs jobs with payloads of size
// bytes (none when 0), due in an hour, from goroutines goroutines. It
// returns the set and the bytes usedMemory grew by.
func putJobs(b *testing.B, rdb *redis.Client, size, jobs int) (*expset.Set, int64) {
	ctx := context.Background()
	fatalIf(b, rdb.FlushAll(ctx).Err(), "flushall")
	s, err := expset.Open(ctx, rdb, uniqueTag("jobs"), expset.WithExpiryEvents(), expset.WithPayloadStorage())
	fatalIf(b, err, "open")
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	var opts []expset.PutOption
	if size > 0 {
		opts = append(opts, expset.WithPayload(payload))
	}
	// The script is loaded before the baseline.
	_, _, err = s.Put(ctx, "warm-up", time.Hour, opts...)
	fatalIf(b, err, "put")
	_, err = s.Cancel(ctx, "warm-up")
	fatalIf(b, err, "cancel")
	before := usedMemory(ctx, b, rdb)
	ids := make(chan string)
	errs := make(chan error, goroutines)
	for range goroutines {
		go func() {
			var first error
			for id := range ids {
				if _, put, err := s.Put(ctx, id, time.Hour, opts...); (err != nil || !put) && first == nil {
					first = fmt.Errorf("put %s: %v %w", id, put, err)
				}
			}
			errs <- first
		}()
	}
	for i := range jobs {
		ids <- fmt.Sprintf("job-%012d", i) // 16 bytes
	}
	close(ids)
	for range goroutines {
		fatalIf(b, <-errs, "put")
	}
	return s, usedMemory(ctx, b, rdb) - before
}

// usedMemory returns INFO's used_memory less the clients' buffers
// (mem_clients_normal).
func usedMemory(ctx context.Context, b *testing.B, rdb *redis.Client) int64 {
	info, err := redistest.Info(ctx, rdb, "memory")
	fatalIf(b, err, "info memory")
	used, err1 := strconv.ParseInt(info["used_memory"], 10, 64)
	clients, err2 := strconv.ParseInt(info["mem_clients_normal"], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("INFO memory: used_memory %q, mem_clients_normal %q", info["used_memory"], info["mem_clients_normal"])
	}
	return used - clients
}
