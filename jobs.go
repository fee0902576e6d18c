package expset

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Jobs without owners (Set.Put) are members of owners the set makes for
// them: a job's ID picks its shard (shardOf, as an owner's would) and, in
// that shard, one of jobBuckets/shards buckets, whose owner is
// jobOwnerPrefix and the bucket's number. The due index, the sweeper, the
// event stream and Consume then treat a job as any member; only the Expiry
// a handler gets shows it, with an empty Owner. Buckets keep each sorted set
// small (Redis stores one of up to 128 members as a compact list: about a
// quarter of the memory of a larger one) while the due index holds a
// bounded number of them. The mapping is part of the stored layout: it must
// never change.
const (
	jobOwnerPrefix = "\x00job:"
	jobBuckets     = 8192 // buckets of a set over all its shards (at least one per shard)
	jobScanCount   = 1000 // stream entries one call of job.lua looks through
)

// Job is the state of a job put with Set.Put, as Set.Job reads it.
type Job struct {
	// State is "waiting" (put and not yet handed to a handler: Due says
	// when it is or was due), "running" (a handler call has begun in some
	// consumer group and the job is not finished there: Attempt says
	// which), "dead" (dead-lettered in a group), or "" when no job of that
	// ID is known: never put, cancelled, or finished by every group.
	State   string
	Due     time.Time // when the job is or was due (zero when State is "")
	Attempt int       // running: the highest handler call begun over the groups, 1 for the first
}

// jobKeys returns the shard, the bucket's owner and the owner keys
// (ownerKeys) of the job with ID id.
func (s *Set) jobKeys(id string) (int, string, []string) {
	n := uint32(len(s.shards))
	h := fnv32(id)
	shard := int(h % n)
	bucket := (h / n) % max(jobBuckets/n, 1)
	owner := jobOwnerPrefix + strconv.FormatUint(uint64(bucket), 10)
	return shard, owner, s.keysIn(shard, owner)
}

// receiptKey returns a key for the receipt of one job call in shard (see
// lua/put.lua): the shard's receipt prefix, "#" (an eviction receipt's
// name starts with a digit) and 96 random bits. The call's retries, sent by
// the client with the same arguments, find it.
func (s *Set) receiptKey(shard int) string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return s.shards[shard].receipt + "#" + base64.RawURLEncoding.EncodeToString(b[:])
}

// jobReceiptMillis is how long, in ms, the receipt of a job call lasts
// (see receiptKey): the longest its client goes on sending a call
// whose reply it lost again, (attempts) x (ReadTimeout + MaxRetryBackoff)
// as the client's options say after their defaults, and at least
// jobReceiptMin; a client of another kind gets jobReceiptMin. It is 0, and
// the scripts write no receipt, for a *redis.Client or *redis.Ring that
// never sends a call again (MaxRetries -1) on a set without WithDurability
// (whose runWrites may).
func (s *Set) jobReceiptMillis() int64 {
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
	if attempts <= 1 && !s.durable.on() {
		return 0
	}
	span := time.Duration(max(attempts, 1)) * (max(read, 0) + max(backoff, 0))
	return max(span, jobReceiptMin).Milliseconds()
}

// jobReceiptMin is the shortest a job call's receipt lasts: past the
// client's own retries (24s with go-redis's defaults on one server), a
// receipt is only memory.
const jobReceiptMin = 10 * time.Second

// jobOwners returns the owners a shard of s may keep jobs and schedule
// ticks under: its job buckets (the same names in every shard) and the
// schedules' owner.
func (s *Set) jobOwners() []any {
	n := max(jobBuckets/len(s.shards), 1)
	out := make([]any, 0, n+1)
	for b := range n {
		out = append(out, jobOwnerPrefix+strconv.Itoa(b))
	}
	return append(out, scheduleOwner)
}

// isJobOwner reports whether an event's owner is a bucket of jobs.
func isJobOwner(owner string) bool { return strings.HasPrefix(owner, jobOwnerPrefix) }

// jobName names job id in errors.
func jobName(id string) string { return "job " + strconv.Quote(id) }

// hideJobOwner returns err, of call op on the job or schedule called what
// (`job "id"`), naming that instead of the key of the owner it is kept
// under, which no caller should see: the cause the runner wrapped with the
// key, wrapped anew. Other errors come back as they are.
func hideJobOwner(err error, op, what string) error {
	if err == nil || !strings.Contains(err.Error(), jobOwnerPrefix) {
		return err
	}
	cause := err
	for strings.Contains(cause.Error(), jobOwnerPrefix) && errors.Unwrap(cause) != nil {
		cause = errors.Unwrap(cause)
	}
	return fmt.Errorf("expset: %s %s: %w", op, what, cause)
}

// checkJob checks a call on job id and, when hasDelay, its delay, which
// it returns in ms.
func (s *Set) checkJob(id string, delay time.Duration, hasDelay bool) (int64, error) {
	if err := s.opened(); err != nil {
		return 0, err
	}
	if !s.events {
		return 0, fmt.Errorf("%w: set %q was opened without WithExpiryEvents: jobs are delivered as expiry events, open it with it", ErrInvalidArgument, s.name)
	}
	if id == "" || len(id) > maxMemberLen {
		return 0, fmt.Errorf("%w: job ID of %d bytes (want 1 to %d)", ErrInvalidArgument, len(id), maxMemberLen)
	}
	if hasDelay && (delay < 0 || delay > maxTTL) {
		return 0, fmt.Errorf("%w: delay %v (want 0 to %v; sub-millisecond parts are dropped)", ErrInvalidArgument, delay, maxTTL)
	}
	return delay.Milliseconds(), nil
}

// Put puts a job with ID id, due after delay, unless a job of that ID is
// waiting already (put and not yet taken by the sweeper, due or not): then
// it changes nothing, and returns that job's due time and false. Put never
// moves a waiting job; Reschedule does. A job's ID spreads it over the
// set's shards. When due, the sweeper turns the job into an expiry event
// that Consume delivers to every consumer group with an empty Owner, the ID
// as Member and the due time as Deadline. delay is 0 (due at once) to 100
// years, truncated to whole milliseconds. Options: WithPayload (the set
// needs WithPayloadStorage). The set needs WithExpiryEvents.
//
// Put is one round trip: one script that costs O(log n) in the jobs of its
// bucket (see docs/jobs.md). It waits for WithDurability's
// acknowledgements as Add does. A Put its client sends again after losing
// the reply (go-redis retries a call after a read timeout, and the server
// may have run both) reports what its first run did, by a receipt the call
// leaves on the server for twice its client's retries (see
// jobReceiptMillis); so do Reschedule and Cancel.
func (s *Set) Put(ctx context.Context, id string, delay time.Duration, opts ...AddOption) (time.Time, bool, error) {
	ms, err := s.checkJob(id, delay, true)
	if err != nil {
		return time.Time{}, false, err
	}
	c, err := callOptions(s, opts, AddOption.applyAdd)
	if err != nil {
		return time.Time{}, false, err
	}
	shard, owner, keys := s.jobKeys(id)
	sk := &s.shards[shard]
	keys = []string{keys[0], sk.due, s.receiptKey(shard)}
	args := s.jobArgs(ms, id, "n")
	if c.hasPayload {
		keys = append(keys, sk.payload+owner)
		if len(args) == 4 {
			args = append(args, c.payload)
		} else {
			args[4] = c.payload
		}
	}
	v, durable, err := s.runWrite(ctx, "put", shard, scriptPut, keys, args, true, func(v any) bool {
		n, _ := v.(int64)
		return n&1 == 1
	})
	if err != nil {
		return time.Time{}, false, hideJobOwner(err, "put", jobName(id))
	}
	n, ok := v.(int64)
	if !ok {
		return time.Time{}, false, unexpected("put.lua", v)
	}
	d, put := n>>1, n&1 == 1 // 2 x deadline + 1 when put (lua/put.lua)
	if put && s.durable.on() && !durable {
		return msTime(d), true, fmt.Errorf("%w: put %s: %s", ErrNotDurable, jobName(id), s.durable.shortfall())
	}
	return msTime(d), put, nil
}

// jobArgs returns put.lua's arguments for a call in mode ("n" or "x") on
// job id, due after ms: with WithClock, ARGV[5] (a payload's place,
// empty) and now as ARGV[6].
func (s *Set) jobArgs(ms int64, id, mode string) []any {
	args := []any{ms, id, s.jobReceiptMillis(), mode}
	if s.clock != nil {
		args = append(args, "", s.now())
	}
	return args
}

// Reschedule makes the waiting job id due after delay instead (earlier or
// later) and returns its new due time; a job moved to now is delivered at
// once. A job not waiting (never put, cancelled, or already taken by the
// sweeper) gets an error matching ErrNotFound. delay is 0 to 100 years, as
// for Put. Reschedule is one round trip: one script, O(log n) in the jobs of
// its bucket.
func (s *Set) Reschedule(ctx context.Context, id string, delay time.Duration) (time.Time, error) {
	ms, err := s.checkJob(id, delay, true)
	if err != nil {
		return time.Time{}, err
	}
	shard, _, keys := s.jobKeys(id)
	keys = []string{keys[0], s.shards[shard].due, s.receiptKey(shard)}
	args := s.jobArgs(ms, id, "x")
	v, durable, err := s.runWrite(ctx, "reschedule", shard, scriptPut, keys, args, true, func(v any) bool { return v != nil })
	if err != nil {
		return time.Time{}, hideJobOwner(err, "reschedule", jobName(id))
	}
	if v == nil {
		return time.Time{}, fmt.Errorf("%w: job %q is not waiting", ErrNotFound, id)
	}
	d, ok := asInt64(v)
	if !ok {
		return time.Time{}, unexpected("put.lua", v)
	}
	if s.durable.on() && !durable {
		return msTime(d), fmt.Errorf("%w: reschedule %s: %s", ErrNotDurable, jobName(id), s.durable.shortfall())
	}
	return msTime(d), nil
}

// Cancel cancels the job id until a handler call of it begins, and
// reports whether it did: a job waiting, due or not, is deleted with its
// payload; a job whose event the sweeper has written has the event deleted,
// if no consumer group has begun a handler call of it (a call Consume gave
// back as it stopped counts as not begun). A cancelled job is never
// delivered, and Job then reports it unknown. Cancel returns false for a
// job unknown, done, dead, or with a call begun in some group. Only the
// newest put of the ID is cancelled.
//
// A waiting job costs one round trip: one script, O(log n) in the jobs of
// its bucket. Any other costs one more, and looks through its shard's
// event stream, newest first, in one round trip per 1,000 entries it
// passes (the stream holds the events some group has not finished), as
// Job does.
func (s *Set) Cancel(ctx context.Context, id string) (bool, error) {
	if _, err := s.checkJob(id, 0, false); err != nil {
		return false, err
	}
	shard, owner, keys := s.jobKeys(id)
	sk := &s.shards[shard]
	receipt, ms := s.receiptKey(shard), s.jobReceiptMillis()
	keys = []string{keys[0], sk.due, receipt}
	if s.payloads {
		keys = append(keys, sk.payload+owner)
	}
	v, err := s.run(ctx, "cancel", shard, scriptCancelWaiting, keys, id, ms)
	if err != nil {
		return false, hideJobOwner(err, "cancel", jobName(id))
	}
	if kind, ok := v.(int64); !ok || kind < 0 || kind > 2 {
		return false, unexpected("cancel_waiting.lua", v)
	} else if kind > 0 {
		return true, nil
	}
	keys = []string{sk.events, sk.att, receipt}
	where := "+"
	for {
		v, err := s.run(ctx, "cancel", shard, scriptCancel, keys, id, owner, where, jobScanCount, ms)
		if err != nil {
			return false, hideJobOwner(err, "cancel", jobName(id))
		}
		xs, ok := v.([]any)
		if !ok || len(xs) == 0 {
			return false, unexpected("cancel.lua", v)
		}
		kind, ok := asInt64(xs[0])
		switch {
		case !ok:
		case kind >= 0 && kind <= 2 && len(xs) == 1:
			return kind > 0, nil
		case kind == 4 && len(xs) == 2:
			if where, ok = asString(xs[1]); ok {
				continue
			}
		}
		return false, unexpected("cancel.lua", v)
	}
}

// Job returns the state of the job id: waiting with its due time, running
// with its attempt, dead, or unknown (State ""). A waiting job costs one
// round trip (one ZSCORE in a script); any other looks through its shard's
// event stream, then its dead letters, newest first, in one round trip per
// 1,000 entries it passes (the stream holds the events some group has not
// finished; dead letters stay until kicked or removed).
func (s *Set) Job(ctx context.Context, id string) (Job, error) {
	if _, err := s.checkJob(id, 0, false); err != nil {
		return Job{}, err
	}
	shard, owner, keys := s.jobKeys(id)
	sk := &s.shards[shard]
	keys = []string{keys[0], sk.events, sk.dead, sk.att}
	where := ""
	for {
		v, err := s.run(ctx, "job", shard, scriptJob, keys, id, owner, where, jobScanCount)
		if err != nil {
			return Job{}, hideJobOwner(err, "read", jobName(id))
		}
		xs, ok := v.([]any)
		if !ok || len(xs) == 0 {
			return Job{}, unexpected("job.lua", v)
		}
		kind, ok := asInt64(xs[0])
		if !ok {
			return Job{}, unexpected("job.lua", v)
		}
		var due, attempt int64
		if kind >= 1 && kind <= 3 {
			if due, ok = asInt64(xs[1]); !ok {
				return Job{}, unexpected("job.lua", v)
			}
		}
		switch {
		case kind == 0 && len(xs) == 1:
			return Job{}, nil
		case kind == 1 && len(xs) == 2:
			return Job{State: "waiting", Due: msTime(due)}, nil
		case kind == 2 && len(xs) == 3:
			if attempt, ok = asInt64(xs[2]); !ok {
				return Job{}, unexpected("job.lua", v)
			}
			return Job{State: "running", Due: msTime(due), Attempt: int(attempt)}, nil
		case kind == 3 && len(xs) == 2:
			return Job{State: "dead", Due: msTime(due)}, nil
		case kind == 4 && len(xs) == 2:
			if where, ok = asString(xs[1]); ok {
				continue
			}
		}
		return Job{}, unexpected("job.lua", v)
	}
}
