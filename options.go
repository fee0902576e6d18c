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
func WithSweepIndex() Option {
	return func(c *setConfig) { c.index = true }
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
// login ends the oldest"). Decision.Evicted lists what went; evictions are not
// expiries and produce no expiry events.
func WithEvictOldest() QuotaOption {
	return func(q *Quota) { q.evict = true }
}

// WithRefreshOnReacquire makes Acquire of a member that already holds a slot
// set its deadline to now+ttl, exactly: the latest call's ttl wins, so a
// shorter ttl shortens it (use Set.Extend to only ever lengthen). By default a
// re-acquire keeps the original
// deadline, so a retried request changes nothing.
func WithRefreshOnReacquire() QuotaOption {
	return func(q *Quota) { q.refresh = true }
}
