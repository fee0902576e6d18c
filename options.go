package expset

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/expset/expset/internal/store"
)

// defaultShards is the shard count of a set opened without WithShards.
const defaultShards = 16

// maxTTL is the longest ttl a call accepts (100 years): deadlines stay far
// inside the range a double holds exactly.
const maxTTL = 100 * 365 * 24 * time.Hour

// maxBatch is the most items one script call takes (store.MaxBatch): the
// largest batch a read, sweep or dead-letter call of the API takes.
const maxBatch = store.MaxBatch

// The options of each call have a type of their own, so that the compiler
// rejects an option given to a call that does not read it
// (NewQuota(s, 3, WithPollInterval(time.Second)) does not compile). Each
// type is an interface whose methods are unexported: only this package makes
// options.
// An option that serves two calls satisfies both their types (LoopOption,
// WriteOption). Options apply in order, the later winning where two set one
// thing. The first invalid one (out of range, or missing the option it
// needs) fails the call it was given to, with an error matching
// ErrInvalidArgument that names the option; nothing is written then. A nil
// option does nothing.

// OpenOption configures Open: WithShards, WithClock, WithExpiryEvents,
// WithPayloadStorage, WithSweepIndex, WithConsumerGroups,
// WithRecordedConfiguration, WithHooks, WithLogger, WithEvictingServer,
// WithDurability.
type OpenOption interface{ applyOpen(*setConfig) error }

// QuotaOption configures NewQuota: WithEvictOldest, WithEvictionReceiptTTL,
// WithRefreshOnReacquire.
type QuotaOption interface{ applyQuota(*Quota) error }

// SweeperOption configures NewSweeper: WithLeaseTTL, WithPollInterval,
// WithOwnersPerBatch, WithMembersPerBatch, WithEventRetention.
type SweeperOption interface{ applySweeper(*sweeperConfig) error }

// ConsumeOption configures Set.Consume: WithLeaseTTL, WithPollInterval,
// WithMaxAttempts, WithRetryBackoff, WithReadBatch, WithMaxHandlingTime,
// WithConcurrency, WithOwnerConcurrency, WithShutdownTimeout,
// WithoutSweeper.
type ConsumeOption interface{ applyConsume(*consumeConfig) error }

// ReserveOption configures Set.Reserve: WithLeaseTTL, WithPollInterval,
// WithMaxAttempts, WithRetryBackoff, WithoutSweeper. The options that shape Consume's
// handler calls (WithReadBatch, WithConcurrency, ...) are not
// ReserveOptions: Reserve's caller makes the calls.
type ReserveOption interface{ applyReserve(*consumeConfig) error }

// DeliveryOption configures both fronts on the set's events, Set.Consume
// and Set.Reserve: WithMaxAttempts, WithRetryBackoff, WithoutSweeper.
type DeliveryOption interface {
	ConsumeOption
	ReserveOption
}

// AddOption configures one Set.Add: WithPayload.
type AddOption interface{ applyAdd(*callConfig) error }

// PutOption configures one Set.Put: WithPayload, and every JobOption.
type PutOption interface{ applyPut(*callConfig) error }

// JobOption configures every call on one job, Set.Put, Set.Reschedule,
// Set.Cancel, Set.Job and Set.JobDeadLetters: WithOwner.
type JobOption interface {
	PutOption
	applyJob(*callConfig) error
}

// AcquireOption configures one Quota.Acquire, Quota.AcquireWait or request
// of Quota.AcquireMany: WithPayload, WithLimit.
type AcquireOption interface{ applyAcquire(*callConfig) error }

// LoopOption configures the background loops, NewSweeper's and
// Set.Consume's, and Set.Reserve: WithLeaseTTL, WithPollInterval.
type LoopOption interface {
	SweeperOption
	ConsumeOption
	ReserveOption
}

// WriteOption configures the writes that carry a payload, Set.Add,
// Quota.Acquire, Set.Put and Set.PutSchedule: WithPayload.
type WriteOption interface {
	AddOption
	AcquireOption
	PutOption
	ScheduleOption
}

type (
	openOption     func(*setConfig) error
	quotaOption    func(*Quota) error
	sweeperOption  func(*sweeperConfig) error
	consumeOption  func(*consumeConfig) error
	deliveryOption func(*consumeConfig) error
	acquireOption  func(*callConfig) error
	writeOption    func(*callConfig) error
	jobOption      func(*callConfig) error
	loopOption     struct {
		sweeper func(*sweeperConfig) error
		consume func(*consumeConfig) error
	}
)

func (f openOption) applyOpen(c *setConfig) error            { return f(c) }
func (f quotaOption) applyQuota(q *Quota) error              { return f(q) }
func (f sweeperOption) applySweeper(c *sweeperConfig) error  { return f(c) }
func (f consumeOption) applyConsume(c *consumeConfig) error  { return f(c) }
func (f acquireOption) applyAcquire(c *callConfig) error     { return f(c) }
func (f writeOption) applyAdd(c *callConfig) error           { return f(c) }
func (f writeOption) applyAcquire(c *callConfig) error       { return f(c) }
func (f writeOption) applyPut(c *callConfig) error           { return f(c) }
func (f jobOption) applyPut(c *callConfig) error             { return f(c) }
func (f jobOption) applyJob(c *callConfig) error             { return f(c) }
func (o loopOption) applySweeper(c *sweeperConfig) error     { return o.sweeper(c) }
func (o loopOption) applyConsume(c *consumeConfig) error     { return o.consume(c) }
func (o loopOption) applyReserve(c *consumeConfig) error     { return o.consume(c) }
func (f deliveryOption) applyConsume(c *consumeConfig) error { return f(c) }
func (f deliveryOption) applyReserve(c *consumeConfig) error { return f(c) }

// applyOptions applies opts to c in order with apply (an option type's
// method, as OpenOption.applyOpen), skipping nil options, and returns the
// first error.
func applyOptions[O any, C any](opts []O, c C, apply func(O, C) error) error {
	for _, o := range opts {
		if any(o) == nil {
			continue
		}
		if err := apply(o, c); err != nil {
			return err
		}
	}
	return nil
}

// inRange returns an ErrInvalidArgument error naming opt when v is outside
// lo..hi.
func inRange[T int | time.Duration](opt string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("%w: %s(%v): want %v to %v", ErrInvalidArgument, opt, v, lo, hi)
	}
	return nil
}

type setConfig struct {
	shards   int
	clock    func() time.Time
	events   bool
	payloads bool
	index    bool
	hooks    Hooks
	logger   *slog.Logger // WithLogger
	groups   []string     // WithConsumerGroups
	recorded bool         // WithRecordedConfiguration

	evictingServer bool             // WithEvictingServer
	durable        store.Durability // WithDurability
}

// WithShards sets how many shards the owners are spread over (default
// 16; 1 to 16384, so 0 is an error). Each shard has its own due index, event
// stream and sweeper lease, and on Redis Cluster its own slot, so more shards
// spread sweeping and events over more nodes and processes. The count is
// recorded in Redis the first time a set is opened: opening it later with
// another count fails with ErrConfigMismatch.
func WithShards(n int) OpenOption {
	return openOption(func(c *setConfig) error {
		c.shards = n
		return inRange("WithShards", n, 1, maxShards)
	})
}

// WithClock makes the set take "now" from now instead of the Redis server's
// TIME (the default, which keeps application servers with skewed clocks in
// agreement). Meant for tests and for servers where scripts cannot read TIME;
// every process using the set should then share one clock. A nil now restores
// the default.
func WithClock(now func() time.Time) OpenOption {
	return openOption(func(c *setConfig) error { c.clock = now; return nil })
}

// WithExpiryEvents turns every expiry into one durable event on the shard's
// stream, read with Set.Consume (default off). With it, owner keys carry no
// key TTL: a Sweeper must run to reclaim expired members and emit their
// events. The setting is recorded in Redis like WithShards.
func WithExpiryEvents() OpenOption {
	return openOption(func(c *setConfig) error { c.events = true; return nil })
}

// WithRecordedConfiguration makes Open open the set with the configuration
// its first Open recorded in Redis (WithShards, WithExpiryEvents,
// WithPayloadStorage, WithSweepIndex), for tools and processes that attach
// to a set they did not create; Open then fails with an error matching
// ErrNotFound when no set of that name exists. Options given beside it still
// apply: WithHooks or WithLogger, say. A recorded setting given
// otherwise fails with ErrConfigMismatch. Without it, Open records the
// options it is given, or checks them against what is recorded, so that a
// service never runs on a set configured other than it expects.
func WithRecordedConfiguration() OpenOption {
	return openOption(func(c *setConfig) error { c.recorded = true; return nil })
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
func WithSweepIndex() OpenOption {
	return openOption(func(c *setConfig) error { c.index = true; return nil })
}

// Event retention defaults (WithEventRetention).
const (
	defaultEventMaxAge = 7 * 24 * time.Hour // events older than this are trimmed
	defaultEventMaxLen = 100_000            // events a shard's stream keeps at most
	maxEventMaxLen     = 1 << 30            // the largest maxLen WithEventRetention accepts
	defaultEventBytes  = 64 << 20           // bytes a shard's stream takes at most
	minEventBytes      = 1 << 20            // the smallest maxBytes WithEventRetention accepts
	maxEventBytes      = 1 << 40            // the largest
)

// retention bounds each shard's event stream.
type retention struct {
	maxAge time.Duration
	maxLen int64
	// maxBytes bounds the stream's memory
	maxBytes int64
	set      bool // given by WithEventRetention
}

// WithEventRetention bounds each shard's event stream, whether or not any
// consumer reads it: events older than maxAge (by their stream ID, the
// server's clock when they were written; 1s to 100 years), then the
// oldest past maxLen events in a shard's stream (1 to 2^30), then the
// oldest while the stream takes more than maxBytes of memory (1 MiB to
// 1 TiB; by Redis's estimate, MEMORY USAGE, which samples the oldest
// entries; the newest event always stays) are removed. Default 7 days,
// 100,000 events and 64 MiB per shard; a zero argument is an error. The sweeper trims,
// in the script that writes events,
// on every sweep of a shard (idle, at every sixth look of its safety poll, WithPollInterval), so a
// stream exceeds the bound only by what was written since the shard's last
// sweep, by sweeps and by Set.Put of jobs due at once (which appends
// without trimming). An event removed this way was not yet acknowledged by every
// consumer group that needs it: retention is the one way an expiry event is
// dropped without a handler having returned nil for it or it being
// dead-lettered. Each shard counts what retention removed (Stats,
// ShardStats.Trimmed, the Trimmed of the SweepStats Hooks.OnSweep receives). Dead letters are not trimmed. The
// retention is not recorded in Redis: every process that sweeps the set
// should give the same. Applies only to a set WithExpiryEvents (NewSweeper
// fails with ErrInvalidArgument otherwise).
func WithEventRetention(maxAge time.Duration, maxLen int, maxBytes int64) SweeperOption {
	return sweeperOption(func(c *sweeperConfig) error {
		switch {
		case maxAge < time.Second || maxAge > maxTTL:
			return fmt.Errorf("%w: WithEventRetention maxAge %v: want 1s to %v", ErrInvalidArgument, maxAge, maxTTL)
		case maxLen < 1 || maxLen > maxEventMaxLen:
			return fmt.Errorf("%w: WithEventRetention maxLen %d: want 1 to %d", ErrInvalidArgument, maxLen, maxEventMaxLen)
		case maxBytes < minEventBytes || maxBytes > maxEventBytes:
			return fmt.Errorf("%w: WithEventRetention maxBytes %d: want 1 MiB (%d) to 1 TiB (%d)", ErrInvalidArgument, maxBytes, int64(minEventBytes), int64(maxEventBytes))
		}
		c.retain = retention{maxAge: maxAge, maxLen: int64(maxLen), maxBytes: maxBytes, set: true}
		return nil
	})
}

// WithLogger sets the logger that the default report of the errors the
// background loops survive writes to (at warning level, rate-limited; see
// Hooks.OnError, which replaces that report when set). Default, and with a
// nil l: slog.Default() at the time of each line.
func WithLogger(l *slog.Logger) OpenOption {
	return openOption(func(c *setConfig) error { c.logger = l; return nil })
}

// WithPayloadStorage lets Add and Acquire store a payload with a member
// (WithPayload), read back with Set.Payload, carried by the member's expiry
// event and removed with the member (default off, which saves the calls that
// keep payloads in step). Recorded in Redis like WithShards.
func WithPayloadStorage() OpenOption {
	return openOption(func(c *setConfig) error { c.payloads = true; return nil })
}

// callConfig is what the options of one Add, Acquire or job call set.
type callConfig struct {
	payload    []byte
	hasPayload bool
	limit      int
	owner      string // WithOwner
	hasOwner   bool
}

// WithPayload stores p with the member, in one Set.Add or Quota.Acquire (at
// most 1 MiB; the set needs WithPayloadStorage), or with the schedule of
// one Set.PutSchedule (which needs no WithPayloadStorage). A nil or empty p
// stores an empty payload, which Set.Payload reads back as empty, not nil.
// An upsert without WithPayload (the default) keeps any payload the member
// already has.
func WithPayload(p []byte) WriteOption {
	return writeOption(func(c *callConfig) error {
		c.payload, c.hasPayload = p, true
		return nil
	})
}

// WithLimit overrides the quota's limit for one Quota.Acquire: a VIP owner
// allowed more, say (default the quota's limit; 1 to 2^30, so 0 is an
// error).
func WithLimit(n int) AcquireOption {
	return acquireOption(func(c *callConfig) error {
		c.limit = n
		return inRange("WithLimit", n, 1, maxLimit)
	})
}

// WithEvictOldest makes Acquire, at the limit, evict the member with the
// earliest deadline instead of denying ("at most 5 sessions per account; a new
// login ends the oldest"; default off: Acquire denies at the limit). Decision.Evicted lists what went, also on a retry
// of the Acquire (see Quota.Acquire and WithEvictionReceiptTTL). An evicted
// member's payload goes with it. With WithExpiryEvents each evicted member
// produces one event, like an expiry, with Expiry.Evicted set, its
// deadline (not reached) and its payload.
func WithEvictOldest() QuotaOption {
	return quotaOption(func(q *Quota) error { q.evict = true; return nil })
}

// defaultEvictionReceiptTTL is how long a retry of an Acquire that evicted
// members still reports them, by default (WithEvictionReceiptTTL).
const defaultEvictionReceiptTTL = 5 * time.Minute

// WithEvictionReceiptTTL sets how long, after an Acquire evicted members
// (WithEvictOldest), a retry of it still reports them in Decision.Evicted
// (default 5 minutes; 1ms to 24h, so 0 is an error; it needs
// WithEvictOldest, and NewQuota fails with ErrInvalidArgument without it). The receipt is
// a small Redis list in the owner's shard, holding the evicted members,
// written only by an Acquire that evicts; it expires on its own.
func WithEvictionReceiptTTL(d time.Duration) QuotaOption {
	return quotaOption(func(q *Quota) error {
		q.receiptTTL, q.receiptSet = d, true
		return inRange("WithEvictionReceiptTTL", d, time.Millisecond, 24*time.Hour)
	})
}

// WithRefreshOnReacquire makes Acquire of a member that already holds a slot
// set its deadline to now+ttl, exactly: the latest call's ttl wins, so a
// shorter ttl shortens it (use Set.Extend to only ever lengthen). By default a
// re-acquire keeps the original
// deadline, so a retried request changes nothing.
func WithRefreshOnReacquire() QuotaOption {
	return quotaOption(func(q *Quota) error { q.refresh = true; return nil })
}

// WithLeaseTTL sets how long a lease lasts without a renewal, for NewSweeper
// (the lease of a Sweeper.Run, which holds its shards; default 10s; 30ms to 1h) and for Set.Consume (a lease on
// one event; default 30s; 1ms to 24h); 0 is an error for both. Each holder renews its leases about
// every third of it, so whoever holds a lease keeps it as long as it lives;
// one that dies, or loses Redis, holds what it leased until this has passed.
//
// A Sweeper that dies leaves its shards unswept that long. A consumer whose
// handler call is running keeps its event however long the call lasts (see
// WithMaxHandlingTime); an event whose consumer died, or lost Redis, goes to
// another consumer once this long has passed since the last renewal. An
// event whose handler failed comes again after its retry delay instead
// (WithRetryBackoff, RetryAfter), shorter or longer than this.
func WithLeaseTTL(d time.Duration) LoopOption {
	return loopOption{
		sweeper: func(c *sweeperConfig) error {
			c.leaseTTL = d
			return inRange("WithLeaseTTL", d, 30*time.Millisecond, time.Hour)
		},
		consume: func(c *consumeConfig) error {
			c.leaseTTL = d
			return inRange("WithLeaseTTL", d, time.Millisecond, 24*time.Hour)
		},
	}
}

// WithPollInterval sets the safety poll of the background loops (default
// 10s; 1ms to 1m, so 0 is an error), for NewSweeper and Set.Consume.
//
// Neither loop polls to find work: the scripts wake them over pub/sub
// (sharded on Redis 7.0+ and Cluster). Sweeper.Run sleeps until the
// earliest deadline of its shards and is woken when a write brings one
// earlier; Consume sleeps until its shards' streams receive events. A
// wake-up can be lost (a reconnect, a failover); every re-subscription
// looks at every shard at once. The safety poll comes every this long,
// stretched beyond 16 shards to shards/16 times this, so that the idle
// cost does not grow with the shard count; it looks at a shard at every
// poll while the shard's subscription is down (not yet subscribed, a
// connection lost until go-redis re-subscribes, or a channel the server
// unsubscribed), and at every second poll while it is up, since a wake-up
// is then lost only without a reconnect. A wake-up lost costs at most this
// much delay (stretched) with the subscription down, twice that with it
// up: 10s and 20s by default at 16 shards or fewer, 160s and 320s at 256;
// a wake-up delivered, none. Consume's look also counts the group's
// entries pending on the shard: while some are, it scans for events to
// claim every 5s at most, so the events of a consumer that died are
// claimed once their lease TTL has passed (WithLeaseTTL) though the
// wake-up that announced them was lost, at most one look later. Idle, one look
// at a shard costs Consume two commands (XREADGROUP, XPENDING) and
// Sweeper.Run one (a ZRANGE of the due index's head; a sweep, six, every
// sixth look).
func WithPollInterval(d time.Duration) LoopOption {
	return loopOption{
		sweeper: func(c *sweeperConfig) error {
			c.maxIdle = d
			return inRange("WithPollInterval", d, time.Millisecond, time.Minute)
		},
		consume: func(c *consumeConfig) error {
			c.poll = d
			return inRange("WithPollInterval", d, time.Millisecond, time.Minute)
		},
	}
}
