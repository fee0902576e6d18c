package store

import (
	"encoding/base64"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// jobs.go holds the layout the job scripts (put.lua, put_now.lua,
// cancel_waiting.lua, cancel.lua, job.lua, and jobs.lua, which the last two
// share) work on.
//
// Jobs of an owner (Set.Put WithOwner) are members of that owner, in its
// shard, as Set.Add's are; the scripts take its keys where they would take
// a bucket's.
//
// Jobs without owners (Set.Put) are members of owners the set makes for
// them: a job's ID picks its shard (ShardOf, as an owner's would) and, in
// that shard, one of jobBuckets/shards buckets, whose owner is
// JobOwnerPrefix and the bucket's number. The due index, the sweeper, the
// event stream and Consume then treat a job as any member; only the Expiry
// a handler gets shows it, with an empty Owner. A job due at once
// (put_now.lua) goes to the stream directly, with the event the sweeper
// would have written for it: its bucket names it there. Buckets keep each sorted set
// small (Redis stores one of up to 128 members as a compact list: about a
// quarter of the memory of a larger one) while the due index holds a
// bounded number of them. The mapping is part of the stored layout: it must
// never change.
const (
	JobOwnerPrefix = "\x00job:"
	jobBuckets     = 8192 // buckets of a set over all its shards (at least one per shard)
	JobScanCount   = 1000 // stream entries one call of job.lua or cancel.lua looks through
)

// ScheduleOwner is the owner of each shard's schedules (Set.PutSchedule):
// a reserved owner like the job buckets.
const ScheduleOwner = JobOwnerPrefix + "sched"

// IndexAnchor is the member every shard's due index of a set with expiry
// events holds at +inf from Open on. Longer than a sorted set's listpack
// may hold (zset-max-listpack-value, 64 bytes by default), it keeps the
// index a skip list at any size, which a restart's load keeps too: a write
// costs O(log n) there, where a listpack of up to 128 owners is searched
// and shifted whole (bench/README.md). It begins with JobOwnerPrefix, so
// no caller's owner is it, and its score keeps it out of every read of
// what is due.
const IndexAnchor = JobOwnerPrefix + "anchor: keeps this due index a skip list (expset docs/design.md)"

// IsJobOwner reports whether an owner is a bucket of jobs (or the
// schedules' owner).
func IsJobOwner(owner string) bool { return strings.HasPrefix(owner, JobOwnerPrefix) }

// jobOwners returns the owners a shard may keep jobs and schedule ticks
// under: its job buckets (the same names in every shard) and the schedules'
// owner.
func (s *Store) jobOwners() []any {
	n := max(jobBuckets/len(s.shards), 1)
	out := make([]any, 0, n+1)
	for b := range n {
		out = append(out, JobOwnerPrefix+strconv.Itoa(b))
	}
	return append(out, ScheduleOwner)
}

// jobKeys returns the shard, the owner and the owner keys (ownerKeys) of
// the job with ID id of owner: owner's own, or, for "" (a job without an
// owner), its bucket's. A job of an owner is the member id of owner, as
// Set.Add's members are.
func (s *Store) jobKeys(owner, id string) (int, string, []string) {
	if owner != "" {
		shard := s.ShardOf(owner)
		return shard, owner, s.keysIn(shard, owner)
	}
	n := uint32(len(s.shards))
	h := FNV32(id)
	shard := int(h % n)
	bucket := (h / n) % max(jobBuckets/n, 1)
	owner = JobOwnerPrefix + strconv.FormatUint(uint64(bucket), 10)
	return shard, owner, s.keysIn(shard, owner)
}

// JobBucket returns the shard of the job with ID id and the owner of its
// bucket there.
func (s *Store) JobBucket(id string) (shard int, owner string) {
	shard, owner, _ = s.jobKeys("", id)
	return shard, owner
}

// receiptKey returns a key for the receipt of one job call in shard (see
// lua/put.lua): the shard's receipt prefix, "#" (an eviction receipt's
// name starts with a digit) and 96 random bits. The call's retries, sent by
// the client with the same arguments, find it.
func (s *Store) receiptKey(shard int) string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return s.shards[shard].Receipt + "#" + base64.RawURLEncoding.EncodeToString(b[:])
}

// jobReceiptMin is the shortest a job call's receipt lasts: past the
// client's own retries (24s with go-redis's defaults on one server), a
// receipt is only memory.
const jobReceiptMin = 10 * time.Second

// JobReceiptMillis is how long, in ms, the receipt of a job call lasts
// (see receiptKey): the longest its client goes on sending a call
// whose reply it lost again, (attempts) x (ReadTimeout + MaxRetryBackoff)
// as the client's options say after their defaults, and at least
// jobReceiptMin; a client of another kind gets jobReceiptMin. It is 0, and
// the scripts write no receipt, for a *redis.Client or *redis.Ring that
// never sends a call again (MaxRetries -1) on a set without WithDurability
// (whose RunWrites may).
func (s *Store) JobReceiptMillis() int64 {
	attempts := 1
	var read, backoff time.Duration
	switch c := s.rdb.(type) {
	case *redis.Client:
		o := c.Options()
		attempts, read, backoff = o.MaxRetries+1, o.ReadTimeout, o.MaxRetryBackoff
	case *redis.Ring:
		o := c.Options()
		attempts, read, backoff = o.MaxRetries+1, o.ReadTimeout, o.MaxRetryBackoff
	case *redis.ClusterClient:
		// Each of its redirects and retries on a timeout runs the node
		// client's retries.
		o := c.Options()
		attempts, read, backoff = (o.MaxRedirects+1)*(o.MaxRetries+1), o.ReadTimeout, o.MaxRetryBackoff
		attempts = max(attempts, 2)
	default:
		return jobReceiptMin.Milliseconds()
	}
	if attempts <= 1 && !s.durable.On() {
		return 0
	}
	span := time.Duration(max(attempts, 1)) * (max(read, 0) + max(backoff, 0))
	return max(span, jobReceiptMin).Milliseconds()
}
