package expset

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// Consume defaults and limits.
const (
	defaultCallLeaseTTL    = 30 * time.Second // WithLeaseTTL
	defaultMaxAttempts     = 5                // WithMaxAttempts
	defaultReadBatch       = 10               // WithReadBatch
	defaultPollInterval    = 10 * time.Second // WithPollInterval: the safety poll
	defaultMaxHandlingTime = time.Minute      // WithMaxHandlingTime
	defaultShutdownTimeout = 30 * time.Second // WithShutdownTimeout
	maxConsumerLen         = 256              // bytes in a consumer group or consumer name
)

// allShards asks DeadLetters for the dead letters of every shard.
const allShards = -1

// Expiry is one expiry event: member of owner reached its deadline and was
// removed. Each consumer group receives it at least once: a handler should
// be idempotent, for instance by keying its work on Owner, Member and
// Deadline. ID alone is not such a key: the shards' streams are separate, so
// two shards' events can carry the same ID, and a kicked dead letter comes
// back with a new one.
type Expiry struct {
	Owner    string // the member's owner; "" for a job of Set.Put, whose ID is Member
	Member   string
	Deadline time.Time // the deadline the member had, to the millisecond (not reached when evicted)
	Evicted  bool      // WithEvictOldest evicted the member before its deadline (false: it reached it)
	Tick     bool      // a tick of a schedule (Set.PutSchedule): Owner is "", Member the schedule's ID, Deadline the tick's time
	Attempt  int       // the handler call this is for the event in its group: 1 for the first, 2 for the second, ...
	Payload  []byte    // the member's payload (WithPayloadStorage), nil when it had none
	Shard    int       // the shard whose stream carried it
	ID       string    // the entry's ID in the shard's event stream (unique with Shard)
}

type consumeConfig struct {
	leaseTTL    time.Duration
	maxAttempts int
	batch       int
	poll        time.Duration
	maxHandling time.Duration
	concurrency int
	ownerCap    int           // WithOwnerConcurrency (0: none)
	groupCap    int           // WithGroupConcurrency (0: none)
	retryFirst  time.Duration // WithRetryBackoff
	retryLimit  time.Duration
	stopWait    time.Duration // WithShutdownTimeout
	noSweep     bool          // WithoutSweeper
}

// WithMaxAttempts sets how many handler calls an event gets in a group
// before it moves to the dead-letter stream (default 5;
// 1 to 1000, so 0 is an error). With 1, the first failure buries it; a
// handler buries its event sooner by returning Bury. Reading an event, holding
// it in a batch, skipping it and shutting down count no attempt.
func WithMaxAttempts(n int) DeliveryOption {
	return deliveryOption(func(c *consumeConfig) error {
		c.maxAttempts = n
		return inRange("WithMaxAttempts", n, 1, 1000)
	})
}

// WithReadBatch sets how many events one read or claim takes from each
// shard's stream (default 10; 1 to 1000, so 0 is an error). A read begins
// the calls it has free call slots for (WithConcurrency); the events past
// those wait, read ahead and charged nothing, and are begun as slots free,
// so that one script call reads many events however few calls run at
// once. One that waited past the lease TTL may be taken by another
// consumer meanwhile, and is then skipped here (no attempt is counted).
func WithReadBatch(n int) ConsumeOption {
	return consumeOption(func(c *consumeConfig) error {
		c.batch = n
		return inRange("WithReadBatch", n, 1, maxBatch)
	})
}

// WithMaxHandlingTime bounds one handler call (default
// 1m; 1ms to 24h, so 0 is an error): the handler's context ends then,
// with context.DeadlineExceeded (also its context.Cause). A call that returns an error after
// it counts as a failed attempt. The lease on the event is renewed until the
// call returns, whenever that is: a handler that ignores its context keeps
// the event (and its Consume) for as long as it runs.
func WithMaxHandlingTime(d time.Duration) ConsumeOption {
	return consumeOption(func(c *consumeConfig) error {
		c.maxHandling = d
		return inRange("WithMaxHandlingTime", d, time.Millisecond, 24*time.Hour)
	})
}

// WithShutdownTimeout bounds how long a Consume whose context has ended
// waits for the handler calls under way to return (default 30s; 0 to 24h,
// 0 returning at once). Their contexts end with Consume's, so a handler
// that heeds its context returns promptly; one that does not is left
// running when the time is up, and Consume returns. What such a call did
// is not settled: its event is neither acknowledged nor retried by this
// Consume, its lease is no longer renewed, and it is delivered again, at
// its next attempt, once its lease TTL has passed (WithLeaseTTL), like the
// event of a consumer that died. asynq's ShutdownTimeout is the model.
func WithShutdownTimeout(d time.Duration) ConsumeOption {
	return consumeOption(func(c *consumeConfig) error {
		c.stopWait = d
		return inRange("WithShutdownTimeout", d, 0, 24*time.Hour)
	})
}

// Consume delivers the set's expiry events to handle until ctx ends, as
// consumer consumerName of the consumer group group. It also sweeps the
// set while it runs, so that what falls due becomes events with no other
// process running: the Consume and Reserve calls of a Set in one process
// share one Sweeper.Run, which takes its share of the shards beside the
// set's other sweepers (WithoutSweeper turns this off, for deployments
// that run sweepers apart). Every group receives
// every event (fan-out: "billing" and "email" each see all of them); within a
// group, each event goes to one of its consumers, in any processes. A group
// is created on each shard's stream when missing, starting at the oldest
// event still retained; declare groups with WithConsumerGroups so that
// events are kept for a group before its first Consume runs. An event leaves
// its stream once every group has handled or dead-lettered it.
//
// Up to WithConcurrency calls of handle run at once (default 1), each on a
// goroutine of its own; with more than one, handle must be safe for
// simultaneous use. One Consume per process, WithConcurrency(n), is the
// way to run a worker pool. Each call is one
// attempt (Expiry.Attempt counts them, 1 on the first), made under a lease:
// while it runs, the event's lease is renewed every third of its TTL
// (WithLeaseTTL), so no other consumer takes it, and the handler's context
// ends when ctx ends, when the lease is lost (context.Cause ErrLeaseLost),
// or after WithMaxHandlingTime (context.DeadlineExceeded); ErrLeaseLost
// means another call of the event has begun (the lease lapsed and another
// consumer took it), and then this call's outcome changes nothing. When
// handle returns nil the event is acknowledged, in a batch per shard:
// within 100ms, before a third of the lease TTL into its lease, and when
// Consume stops (a consumer that dies first leaves them to be handled
// again); the acknowledgement of a last attempt (WithMaxAttempts) is sent
// at once, so a handled event is never dead-lettered. When it fails, the event is delivered
// again, to any consumer of the group, after a retry delay
// (WithRetryBackoff: 1s, doubling up to 5m, by default; or the handler's
// own, returned through RetryAfter), whether shorter or longer than the
// lease TTL; scheduling it is one round trip. When the call that fails is
// attempt WithMaxAttempts, or returns Bury, the event moves to the shard's
// dead-letter stream with the error (see DeadLetters, Kick). An
// event whose last attempt never returned (the consumer died, or lost Redis
// for longer than the lease TTL) is dead-lettered by the consumer that
// finds it. Nothing else is:
// an event that no handler call failed on is never dead-lettered, except an
// entry that cannot be read as an event at all, which is dead-lettered at
// once with attempt 0.
//
// Each shard's stream is read on its own (on Redis Cluster the shards live on
// different nodes), in one pipeline of non-blocking reads. An idle Consume
// sleeps until a wake-up (pub/sub: one subscription per shard, one for all
// on a single server) says a shard's stream received events, and reads that
// shard; a safety poll reads each shard every WithPollInterval, or every
// second one while the shard's subscription is up (see there). Events of
// one shard arrive in the order they expired, except redeliveries.
//
// Consume keeps going through Redis failures: a failing shard is retried
// with capped exponential backoff while the others carry on, and every error
// goes to Hooks.OnError (by default, log/slog). A deleted stream (Drop, DEL,
// a restart without persistence) is made again with the group. When ctx
// ends, events read and not yet handed to handle go back for prompt
// redelivery with no attempt counted, Consume waits for the calls under way
// (at most WithShutdownTimeout), handled events are acknowledged, and the
// consumer leaves its group when it holds nothing; Consume then returns
// nil. It returns an error only for misuse, at once: ErrInvalidArgument
// (a bad group, consumer or option, or a set without expiry events).
// Options: WithLeaseTTL, WithMaxAttempts, WithRetryBackoff,
// WithMaxHandlingTime, WithReadBatch, WithPollInterval, WithConcurrency,
// WithOwnerConcurrency, WithGroupConcurrency, WithShutdownTimeout,
// WithoutSweeper.
func (s *Set) Consume(ctx context.Context, group, consumerName string, handle func(context.Context, Expiry) error, opts ...ConsumeOption) error {
	cfg := defaultConsumeConfig()
	if err := applyOptions(opts, &cfg, ConsumeOption.applyConsume); err != nil {
		return err
	}
	if handle == nil {
		return fmt.Errorf("%w: nil handler", ErrInvalidArgument)
	}
	c, err := s.newConsumer(group, consumerName, cfg)
	if err != nil {
		return err
	}
	if !cfg.noSweep {
		if err := s.sweeping.join(ctx, s); err != nil {
			return err
		}
		defer s.sweeping.leave() // last: after the calls have settled
	}
	c.handle = handle
	c.pool = newPool(c)
	c.wk = s.listen("subscribe", func(k *store.Keys) string { return k.EvWake })
	if c.gslots = c.newGroupSlots(); c.gslots != nil {
		defer c.listenFreed()()
	}
	s.retryNotes.join(c)
	defer s.retryNotes.leave(c)
	defer c.wk.close()
	defer c.stop(ctx)
	c.pool.leases.start(ctx)
	defer c.drain(ctx)
	return s.loop(ctx, "consume", c.wk.signal, func() (time.Duration, error) {
		c.takeRetries()
		return c.poolRound(ctx), nil
	})
}

// defaultConsumeConfig returns the configuration of a Consume or Reserve
// given no option.
func defaultConsumeConfig() consumeConfig {
	return consumeConfig{
		leaseTTL:    defaultCallLeaseTTL,
		maxAttempts: defaultMaxAttempts,
		batch:       defaultReadBatch,
		poll:        defaultPollInterval,
		maxHandling: defaultMaxHandlingTime,
		concurrency: 1,
		retryFirst:  defaultRetryFirst,
		retryLimit:  defaultRetryLimit,
		stopWait:    defaultShutdownTimeout,
	}
}

// newConsumer checks the arguments of a Consume or Reserve, configured by
// cfg, and returns its consumer.
func (s *Set) newConsumer(group, name string, cfg consumeConfig) (*consumer, error) {
	if err := s.opened(); err != nil {
		return nil, err
	}
	if !s.events {
		return nil, fmt.Errorf("%w: set %q has no expiry events: open it WithExpiryEvents to consume them", ErrInvalidArgument, s.name)
	}
	for _, n := range []string{group, name} {
		if err := validateConsumerName(n); err != nil {
			return nil, err
		}
	}
	if name == retryHolder {
		return nil, fmt.Errorf("%w: consumer name %q is reserved for events waiting to be retried: choose another", ErrInvalidArgument, name)
	}
	beat := max(cfg.leaseTTL/3, time.Millisecond)
	c := &consumer{
		set: s, group: group, name: name, cfg: cfg,
		shards:     make([]consumerShard, len(s.shards)),
		acks:       make([][]pendingAck, len(s.shards)),
		claimEvery: min(max(cfg.leaseTTL/4, cfg.poll), 5*time.Second),
		pruneIdle:  2*cfg.leaseTTL + 10*cfg.poll,
		safety:     safetyEvery(cfg.poll, len(s.shards)),
		beat:       beat,
	}
	start := time.Now()
	for i := range c.shards {
		c.shards[i].cursor = "0-0"
		c.shards[i].grid = pollOrigin(start, c.safety, i, len(c.shards))
	}
	return c, nil
}

func validateConsumerName(n string) error {
	if n == "" || len(n) > maxConsumerLen {
		return fmt.Errorf("%w: consumer group or consumer name %q must be 1 to %d bytes", ErrInvalidArgument, n, maxConsumerLen)
	}
	return nil
}

// parseExpiry reads an event stream entry (fields o, m, d and maybe p and
// r).
func parseExpiry(shard int, m redis.XMessage, attempt int) (Expiry, error) {
	e := Expiry{Shard: shard, ID: m.ID, Attempt: attempt}
	var ok1, ok2, ok3 bool
	var d string
	e.Owner, ok1 = m.Values["o"].(string)
	e.Member, ok2 = m.Values["m"].(string)
	d, ok3 = m.Values["d"].(string)
	ms, err := strconv.ParseInt(d, 10, 64)
	var ok4 bool
	e.Evicted, ok4 = parseEvicted(m.Values["r"])
	if !ok1 || !ok2 || !ok3 || !ok4 || err != nil {
		return e, fmt.Errorf("%w: malformed expiry event %s: %v", errUnexpectedReply, m.ID, m.Values)
	}
	e.Deadline = msTime(ms)
	if isJobOwner(e.Owner) {
		e.Tick = e.Owner == scheduleOwner
		e.Owner = "" // a job of Set.Put, or a schedule's tick
	}
	if p, ok := m.Values["p"].(string); ok {
		e.Payload = []byte(p)
	}
	return e, nil
}

// consumer is the state of one Consume call. It is used by Consume's
// goroutine only (the lease heartbeat touches none of it), but for what a
// pool's calls and lease keeper use (see pool.go): its configuration, and
// the acknowledgement buffer under the keeper's lock.
type consumer struct {
	set         *Set
	group, name string
	handle      func(context.Context, Expiry) error
	cfg         consumeConfig
	shards      []consumerShard
	acks        [][]pendingAck // per shard: events handled (or not meant for the group), not yet acknowledged
	ackDue      time.Time      // when acks must be sent (zero when none wait)
	claimEvery  time.Duration  // how often each shard's pending list is scanned for events to claim
	pruneIdle   time.Duration  // consumers idle this long with nothing pending are removed
	beat        time.Duration  // how often a handler call's lease is renewed
	wk          *wakeups       // the wake-ups of the shards' streams
	safety      time.Duration  // how often each shard is looked at without a wake-up
	pool        *pool          // Consume's handler calls under way (nil for Reserve)
	nextRead    int            // the shard a read limited by free handler slots starts from
	parked      parking        // events whose owners were at their cap (WithOwnerConcurrency)
	gslots      *groupSlots    // the group's call slots (WithGroupConcurrency; nil without)
	paused      time.Time      // when a begin found the group paused (zero: not so since; pause.go)
	ahead       []delivery     // events read past those begun, oldest first: begun when a call slot frees
	passing     int            // the read batch while reads find only owners at their cap (readNew; 0: WithReadBatch)
	retries     []retryDues    // per shard: the retries this consumer scheduled (retry.go)
	retryMu     sync.Mutex     // guards retryNotes
	retryNotes  []retryNote    // retries scheduled since the last round (retry.go)
	reserving   *reservers     // the set's Reserve state, for a consumer of Reserve (else nil)
}

// consumerShard is what a consumer knows of one shard.
type consumerShard struct {
	grouped   bool      // the group is known to exist on the shard's stream
	cursor    string    // where the next claim scan starts
	nextClaim time.Time // when to scan for events to claim
	nextPrune time.Time // when to remove idle consumers
	retryAt   time.Time // the shard failed: leave it alone until then
	bo        backoff
	// Idle waiting: a shard is read when a wake-up names it, while its
	// reads return events (busy), and at the safety poll (nextVisit),
	// which also asks whether the group has entries pending there; claims
	// run only while some may be (active).
	busy      bool
	active    bool
	nextVisit time.Time
	looked    time.Time // when a safety poll last read it (looking)
	grid      time.Time // the origin of its safety polls (nextPoll)
}

// delivery is an event read or claimed, waiting for its handler call.
type delivery struct {
	shard  int
	id     string
	values map[string]any
	at     time.Time // when the read or claim that took it was sent: its lease started after
	parked bool      // it comes from the events set aside (owners.go)
	slot   string    // the group call slot it holds, its call's token (WithGroupConcurrency: grant)
	new    bool      // read new (XREADGROUP ... >): no call of it has begun
}

// parseEvicted reads an event entry's r field: absent for an expiry,
// "evicted" for an eviction.
func parseEvicted(v any) (evicted, ok bool) {
	switch v {
	case nil:
		return false, true
	case "evicted":
		return true, true
	}
	return false, false
}
