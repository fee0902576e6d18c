package expset

import (
	"fmt"
	"time"
)

// DefaultShards is the shard count of a set opened without WithShards.
const DefaultShards = 16

// MaxTTL is the longest ttl a call accepts: deadlines stay far inside the
// range a double holds exactly.
const MaxTTL = 100 * 365 * 24 * time.Hour

// Option configures a Set in New or Open.
type Option func(*setConfig)

type setConfig struct {
	shards   int
	clock    func() time.Time
	events   bool
	payloads bool
	index    bool
	retain   retention
	hooks    Hooks
	groups   []string // WithConsumerGroups
	err      error
}

func (c *setConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithShards sets how many shards the owners are spread over (default
// DefaultShards, 16; 1 to MaxShards). Each shard has its own due index, event
// stream and sweeper lease, and on Redis Cluster its own slot, so more shards
// spread sweeping and events over more nodes and processes. The count is
// recorded in Redis the first time a set is opened: opening it later with
// another count fails with ErrConfigMismatch.
func WithShards(n int) Option {
	return func(c *setConfig) {
		if n < 1 || n > MaxShards {
			c.fail(fmt.Errorf("%w: WithShards(%d): want 1 to %d", ErrInvalidOption, n, MaxShards))
			return
		}
		c.shards = n
	}
}

// WithClock makes the set take "now" from now instead of the Redis server's
// TIME (the default, which keeps application servers with skewed clocks in
// agreement). Meant for tests and for servers where scripts cannot read TIME;
// every process using the set should then share one clock. A nil now restores
// the default.
func WithClock(now func() time.Time) Option {
	return func(c *setConfig) { c.clock = now }
}

// WithExpiryEvents turns every expiry into one durable event on the shard's
// stream, read with Set.Consume (default off). With it, owner keys carry no
// key TTL: a Sweeper must run to reclaim expired members and emit their
// events. The setting is recorded in Redis like WithShards.
func WithExpiryEvents() Option {
	return func(c *setConfig) { c.events = true }
}

// WithSweepIndex keeps each shard's due index (owner -> earliest deadline)
// on a set without expiry events, so that a Sweeper can reclaim expired
// members promptly (default off). Without it such a set needs no sweeper:
// owner keys expire by their key TTL once their latest deadline passes, and
// every write to an owner drops its expired members; the index would cost a
// write for each new owner and about 100 bytes per owner. WithExpiryEvents
// always keeps the index. Recorded in Redis like WithShards.
//
// Without expiry events the index stays bounded with no sweeper running:
// its key expires an hour after the latest deadline filed in it (by a write
// or a sweep), and every write that files an owner first removes up to two
// entries overdue by more than an hour. So an entry outlives its owner by at
// most an hour once writes stop, and while writes go on, entries overdue by
// more than an hour are removed twice as fast as owners are filed. An entry
// dropped this way only costs the sweeper its shortcut to that owner, whose
// key still expires by its TTL.
func WithSweepIndex() Option {
	return func(c *setConfig) { c.index = true }
}

// Event retention defaults (WithEventRetention).
const (
	DefaultEventMaxAge = 7 * 24 * time.Hour // events older than this are trimmed
	DefaultEventMaxLen = 100_000            // events a shard's stream keeps at most
	MaxEventMaxLen     = 1 << 30            // the largest maxLen WithEventRetention accepts
)

// retention bounds each shard's event stream.
type retention struct {
	maxAge time.Duration
	maxLen int64
	set    bool // given by WithEventRetention
}

// WithEventRetention bounds each shard's event stream, whether or not any
// consumer reads it: events older than maxAge (by their stream ID, the
// server's clock when the sweeper wrote them; 1s to MaxTTL) and, past maxLen
// events in a shard's stream (1 to MaxEventMaxLen), the oldest ones are
// removed. Default DefaultEventMaxAge (7 days) and DefaultEventMaxLen
// (100,000 per shard). The sweeper trims, in the script that writes events,
// on every sweep of a shard (at least every WithMaxIdle while Run runs), so a
// stream exceeds the bound only by what was written since the shard's last
// sweep. An event removed this way was not yet acknowledged by every
// consumer group that needs it: retention is the one way an expiry event is
// dropped without a handler having returned nil for it or it being
// dead-lettered. Each shard counts what retention removed (Stats,
// ShardStats.Trimmed, SweepInfo.Trimmed). Dead letters are not trimmed. The
// retention is not recorded in Redis: every process that sweeps the set
// should give the same. Applies only to a set WithExpiryEvents (Open fails
// with ErrInvalidOption otherwise).
func WithEventRetention(maxAge time.Duration, maxLen int) Option {
	return func(c *setConfig) {
		switch {
		case maxAge < time.Second || maxAge > MaxTTL:
			c.fail(fmt.Errorf("%w: WithEventRetention maxAge %v: want 1s to %v", ErrInvalidOption, maxAge, MaxTTL))
		case maxLen < 1 || maxLen > MaxEventMaxLen:
			c.fail(fmt.Errorf("%w: WithEventRetention maxLen %d: want 1 to %d", ErrInvalidOption, maxLen, MaxEventMaxLen))
		default:
			c.retain = retention{maxAge: maxAge, maxLen: int64(maxLen), set: true}
		}
	}
}

// WithPayloads lets Add and Acquire store a payload with a member
// (WithPayload), read back with Set.Payload, carried by the member's expiry
// event and removed with the member (default off, which saves the calls that
// keep payloads in step). Recorded in Redis like WithShards.
func WithPayloads() Option {
	return func(c *setConfig) { c.payloads = true }
}

// CallOption configures one Add or Acquire call.
type CallOption func(*callConfig)

type callConfig struct {
	payload    []byte
	hasPayload bool
	limit      int
	err        error
}

// WithPayload stores p with the member (at most MaxPayloadLen bytes; the set
// needs WithPayloads). An upsert without WithPayload keeps any payload the
// member already has.
func WithPayload(p []byte) CallOption {
	return func(c *callConfig) {
		c.payload, c.hasPayload = p, true
	}
}

// WithLimit overrides the quota's limit for one Acquire: a VIP owner allowed
// more, say (1 to MaxLimit). Add rejects it with ErrInvalidOption.
func WithLimit(n int) CallOption {
	return func(c *callConfig) {
		if n < 1 || n > MaxLimit {
			c.err = fmt.Errorf("%w: WithLimit(%d): want 1 to %d", ErrInvalidLimit, n, MaxLimit)
			return
		}
		c.limit = n
	}
}

// QuotaOption configures a Quota in NewQuota.
type QuotaOption func(*Quota)

// WithEvictOldest makes Acquire, at the limit, evict the member with the
// earliest deadline instead of denying ("at most 5 sessions per account; a new
// login ends the oldest"). Decision.Evicted lists what went, also on a retry
// of the Acquire (see Quota.Acquire and WithEvictionReceiptTTL). An evicted
// member's payload goes with it. With WithExpiryEvents each evicted member
// produces one event, like an expiry, with Expiry.Reason ReasonEvicted, its
// deadline (not reached) and its payload.
func WithEvictOldest() QuotaOption {
	return func(q *Quota) { q.evict = true }
}

// DefaultEvictionReceiptTTL is how long a retry of an Acquire that evicted
// members still reports them, by default (WithEvictionReceiptTTL).
const DefaultEvictionReceiptTTL = 5 * time.Minute

// WithEvictionReceiptTTL sets how long, after an Acquire evicted members
// (WithEvictOldest), a retry of it still reports them in Decision.Evicted
// (default DefaultEvictionReceiptTTL, 5 minutes; 1ms to 24h). The receipt is
// a small Redis list in the owner's shard, holding the evicted members,
// written only by an Acquire that evicts; it expires on its own.
func WithEvictionReceiptTTL(d time.Duration) QuotaOption {
	return func(q *Quota) {
		if err := inRange("WithEvictionReceiptTTL", d, time.Millisecond, 24*time.Hour); err != nil && q.err == nil {
			q.err = err
		}
		q.receiptTTL = d
	}
}

// WithRefreshOnReacquire makes Acquire of a member that already holds a slot
// set its deadline to now+ttl, exactly: the latest call's ttl wins, so a
// shorter ttl shortens it (use Set.Extend to only ever lengthen). By default a
// re-acquire keeps the original
// deadline, so a retried request changes nothing.
func WithRefreshOnReacquire() QuotaOption {
	return func(q *Quota) { q.refresh = true }
}
