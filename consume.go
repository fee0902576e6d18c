package expset

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Consume defaults and limits.
const (
	defaultVisibilityTimeout = 30 * time.Second // WithLeaseTTL
	defaultMaxAttempts       = 5                // WithMaxAttempts
	defaultReadBatch         = 10               // WithReadBatch
	defaultPollInterval      = 10 * time.Second // WithPollInterval: the safety poll
	defaultMaxHandlingTime   = time.Minute      // WithMaxHandlingTime
	maxConsumerLen           = 256              // bytes in a consumer group or consumer name
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
	Attempt  int       // the handler call this is for the event in its group: 1 for the first, 2 for the second, ...
	Payload  []byte    // the member's payload (WithPayloadStorage), nil when it had none
	Shard    int       // the shard whose stream carried it
	ID       string    // the entry's ID in the shard's event stream (unique with Shard)
}

type consumeConfig struct {
	visibility  time.Duration
	maxAttempts int
	batch       int
	poll        time.Duration
	maxHandling time.Duration
	concurrency int
	ownerCap    int           // WithOwnerConcurrency (0: none)
	retryFirst  time.Duration // WithRetryBackoff
	retryLimit  time.Duration
}

// WithMaxAttempts sets how many handler calls an event gets in a group
// before it moves to the dead-letter stream (default 5;
// 1 to 1000, so 0 is an error). With 1, the first failure buries it; a
// handler buries its event sooner by returning Bury. Reading an event, holding
// it in a batch, skipping it and shutting down count no attempt.
func WithMaxAttempts(n int) ConsumeOption {
	return consumeOption(func(c *consumeConfig) error {
		c.maxAttempts = n
		return inRange("WithMaxAttempts", n, 1, 1000)
	})
}

// WithReadBatch sets how many events one read takes from each shard's
// stream (default 10; 1 to 1000, so 0 is an error). Events read wait their
// turn for the handler; one that waited past the lease TTL may be
// taken by another consumer meanwhile, and is then skipped here (no attempt
// is counted). With WithConcurrency, a read takes no more than the free call
// slots, so nothing read waits.
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

// Consume delivers the set's expiry events to handle until ctx ends, as
// consumer consumerName of the consumer group group. Every group receives
// every event (fan-out: "billing" and "email" each see all of them); within a
// group, each event goes to one of its consumers, in any processes. A group
// is created on each shard's stream when missing, starting at the oldest
// event still retained; declare groups with WithConsumerGroups so that
// events are kept for a group before its first Consume runs. An event leaves
// its stream once every group has handled or dead-lettered it.
//
// handle runs in Consume's goroutine, one event at a time, unless
// WithConcurrency allows more: then up to n calls run at once, each on a
// goroutine of its own. One Consume per process, WithConcurrency(n), is the
// way to run a worker pool. Each call is one
// attempt (Expiry.Attempt counts them, 1 on the first), made under a lease:
// while it runs, the event's lease is renewed every third of its TTL
// (WithLeaseTTL), so no other consumer takes it, and the handler's context
// ends when ctx ends, when the lease is lost (context.Cause ErrLeaseLost),
// or after WithMaxHandlingTime (context.DeadlineExceeded). When handle
// returns nil the event is acknowledged, in a batch per shard: when the
// events of the read are handled, within 100ms, before a third of the lease
// TTL into its lease, and when Consume stops (a consumer that dies first
// leaves them to be handled again); the acknowledgement of a last attempt
// (WithMaxAttempts) is sent at once, so a handled event is never
// dead-lettered. When it fails, the event is delivered
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
// shard; a safety poll reads each shard at least every WithPollInterval
// (see there). Events of one shard arrive in the order they expired, except
// redeliveries.
//
// Consume keeps going through Redis failures: a failing shard is retried
// with capped exponential backoff while the others carry on, and every error
// goes to Hooks.OnError (by default, log/slog). A deleted stream (Drop, DEL,
// a restart without persistence) is made again with the group. When ctx
// ends, events read and not yet handed to handle go back for prompt
// redelivery with no attempt counted, handled events are acknowledged, and
// the consumer leaves its group when it holds nothing; Consume then returns
// nil. It returns an error only for misuse, at once: ErrInvalidArgument
// (a bad group, consumer or option, or a set without expiry events). Options: WithLeaseTTL,
// WithMaxAttempts, WithRetryBackoff, WithMaxHandlingTime, WithReadBatch,
// WithPollInterval, WithConcurrency. With WithConcurrency, Consume returns
// once the calls under way have returned.
func (s *Set) Consume(ctx context.Context, group, consumerName string, handle func(context.Context, Expiry) error, opts ...ConsumeOption) error {
	c, err := s.newConsumer(group, consumerName, handle, opts, false)
	if err != nil {
		return err
	}
	c.wk = s.listen("subscribe", func(k *shardKeys) string { return k.evWake })
	defer c.wk.close()
	defer c.stop(ctx)
	if c.pool != nil {
		c.pool.leases.start(ctx)
		defer c.drain(ctx)
	}
	return s.loop(ctx, "consume", c.wk.signal, func() (time.Duration, error) {
		c.takeRetries()
		return c.round(ctx), nil
	})
}

// newConsumer checks Consume's arguments (Reserve's, when pull: then
// handle is nil) and returns the consumer.
func (s *Set) newConsumer(group, name string, handle func(context.Context, Expiry) error, opts []ConsumeOption, pull bool) (*consumer, error) {
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
	if handle == nil && !pull {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalidArgument)
	}
	cfg := consumeConfig{
		visibility:  defaultVisibilityTimeout,
		maxAttempts: defaultMaxAttempts,
		batch:       defaultReadBatch,
		poll:        defaultPollInterval,
		maxHandling: defaultMaxHandlingTime,
		concurrency: 1,
		retryFirst:  defaultRetryFirst,
		retryLimit:  defaultRetryLimit,
	}
	if pull {
		// Refused: they shape handler calls, which Reserve's caller runs.
		cfg.batch, cfg.maxHandling, cfg.concurrency, cfg.ownerCap = 0, 0, 0, -1
	}
	if err := applyOptions(opts, &cfg, ConsumeOption.applyConsume); err != nil {
		return nil, err
	}
	if pull {
		if cfg.batch != 0 || cfg.maxHandling != 0 || cfg.concurrency != 0 || cfg.ownerCap != -1 {
			return nil, fmt.Errorf("%w: Reserve takes WithLeaseTTL, WithMaxAttempts, WithRetryBackoff and WithPollInterval; WithReadBatch, WithMaxHandlingTime, WithConcurrency and WithOwnerConcurrency shape Consume's handler calls: leave them out", ErrInvalidArgument)
		}
		cfg.batch, cfg.maxHandling, cfg.concurrency, cfg.ownerCap = 1, defaultMaxHandlingTime, 1, 0
	}
	beat := max(cfg.visibility/3, time.Millisecond)
	c := &consumer{
		set: s, group: group, name: name, handle: handle, cfg: cfg,
		shards:     make([]consumerShard, len(s.shards)),
		acks:       make([][]string, len(s.shards)),
		claimEvery: min(max(cfg.visibility/4, cfg.poll), 5*time.Second),
		pruneIdle:  2*cfg.visibility + 10*cfg.poll,
		safety:     safetyEvery(cfg.poll, len(s.shards)),
		visMs:      max(cfg.visibility.Milliseconds(), 1),
		beat:       beat,
	}
	if cfg.concurrency > 1 || cfg.ownerCap > 0 {
		// A cap reads past the events of owners at it (take.lua): the pool's way.
		c.pool = newPool(c)
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
		e.Owner = "" // a job of Set.Put
	}
	if p, ok := m.Values["p"].(string); ok {
		e.Payload = []byte(p)
	}
	return e, nil
}

// maxAckDelay is the longest an acknowledgement waits in a consumer's
// buffer while handler calls go on: the acknowledgements of handled events
// are sent in batches, one script per shard, when a round's events are all
// handled, when one has waited this long or its lease has run for a third
// of the lease TTL (with the next handler call's start, or during
// a handler call that lasts), and when Consume stops.
const maxAckDelay = 100 * time.Millisecond

// finishTimeout bounds the Redis calls that settle an event after its
// handler returned, and those of a stopping Consume: they run even when ctx
// has just ended.
const finishTimeout = 5 * time.Second

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
	acks        [][]string    // per shard: IDs handled (or not meant for the group), not yet acknowledged
	ackDue      time.Time     // when acks must be sent (zero when none wait)
	claimEvery  time.Duration // how often each shard's pending list is scanned for events to claim
	pruneIdle   time.Duration // consumers idle this long with nothing pending are removed
	visMs       int64         // the lease TTL in ms
	beat        time.Duration // how often a handler call's lease is renewed
	wk          *wakeups      // the wake-ups of the shards' streams
	safety      time.Duration // how often each shard is looked at without a wake-up
	pool        *pool         // the handler calls under way, WithConcurrency over 1 (else nil)
	nextRead    int           // the shard a read limited by free handler slots starts from
	parked      parking       // events whose owners were at their cap (WithOwnerConcurrency)
	retries     []retryDues   // per shard: the retries this consumer scheduled (retry.go)
	retryMu     sync.Mutex    // guards retryNotes
	retryNotes  []retryNote   // retries scheduled since the last round (retry.go)
	reserving   *reservers    // the set's Reserve state, for a consumer of Reserve (else nil)
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
	grid      time.Time // the origin of its safety polls (nextPoll)
}

// delivery is an event read or claimed, waiting for its handler call.
type delivery struct {
	shard  int
	id     string
	values map[string]any
	at     time.Time // when the read or claim that took it was sent: its lease started after
	parked bool      // it comes from the events set aside (owners.go)
}

// round does one pass over the shards that are not backing off: it makes
// missing groups, claims what is due, reads new events of the shards that
// were woken, busy or due a safety poll, and hands them all to the handler.
// It returns how long to wait before the next round, unless a wake-up comes
// first. A Consume WithConcurrency over 1 or WithOwnerConcurrency runs
// poolRound instead.
func (c *consumer) round(ctx context.Context) time.Duration {
	if c.pool != nil {
		return c.poolRound(ctx)
	}
	_ = c.flushAcks(ctx) // left over from a failure: before anything else
	now := time.Now()
	claimed, read, visit := c.survey(ctx, now, -1)
	todo := append(claimed, c.read(ctx, read, visit, -1)...)
	c.deliverAll(ctx, todo)

	if len(todo) > 0 {
		return 0
	}
	return c.idleWait(now)
}

// survey looks at each shard not backing off at now: it takes the wake-ups
// come since the last round, makes a missing group, claims what is due (at
// most budget events in all, < 0: a read batch per shard; a shard left
// unclaimed for want of budget is claimed at a later round) and prunes idle
// consumers. It returns the events claimed, the shards to read (woken or
// busy) and those due a safety poll.
func (c *consumer) survey(ctx context.Context, now time.Time, budget int) (todo []delivery, read, visit []int) {
	var woken map[int]int64
	if c.wk != nil {
		woken = c.wk.take()
	}
	for i := range c.shards {
		sh := &c.shards[i]
		d, ok := woken[i]
		if ok {
			sh.busy = true
		}
		if ok && d == wakeNow {
			// Events came: some consumer may read them and die with them.
			if !sh.active {
				sh.active = true
				sh.nextClaim = now.Add(c.claimEvery)
			}
		}
		if now.Before(sh.retryAt) {
			continue
		}
		if !sh.grouped {
			if err := c.makeGroups(ctx, i); err != nil {
				c.fail(ctx, i, err)
				continue
			}
			sh.grouped = true
		}
		if sh.active && !now.Before(sh.nextClaim) && budget != 0 {
			ds, err := c.claim(ctx, i, budget)
			if err != nil {
				c.fail(ctx, i, err)
				continue
			}
			if budget > 0 {
				budget = max(budget-len(ds), 0)
			}
			todo = append(todo, ds...)
		}
		if !now.Before(sh.nextPrune) {
			if err := c.prune(ctx, i, c.pruneIdle.Milliseconds(), ""); err != nil {
				c.fail(ctx, i, err)
				continue
			}
			sh.nextPrune = now.Add(max(c.pruneIdle, 4*c.safety))
		}
		switch {
		case !now.Before(sh.nextVisit):
			visit = append(visit, i)
		case sh.busy:
			read = append(read, i)
		}
	}
	return todo, read, visit
}

// idleWait returns how long an idle consumer waits from now: until the next
// safety poll, claim or prune that is due, unless a wake-up comes first.
func (c *consumer) idleWait(now time.Time) time.Duration {
	next := now.Add(c.safety)
	for i := range c.shards {
		sh := &c.shards[i]
		at := sh.nextVisit
		if sh.active && sh.nextClaim.Before(at) {
			at = sh.nextClaim
		}
		at = minTime(at, sh.nextPrune)
		if sh.retryAt.After(now) {
			at = sh.retryAt
		}
		next = minTime(next, at)
	}
	if len(c.parked.ring) > 0 {
		next = minTime(next, c.parked.at)
	}
	return max(time.Until(next), time.Millisecond)
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// fail reports err, confined to shard i, and makes the shard back off. A
// missing group (the stream was deleted) is made again at the shard's next
// round.
func (c *consumer) fail(ctx context.Context, i int, err error) {
	if ctx.Err() != nil {
		return
	}
	sh := &c.shards[i]
	if isNoGroup(err) {
		sh.grouped = false
		sh.cursor = "0-0"
		if c.reserving != nil {
			c.reserving.grouped(c.group, i, len(c.shards), false)
		}
	}
	wait := sh.bo.fail()
	sh.retryAt = time.Now().Add(wait)
	c.set.reportError(ctx, "consume", i, err, wait)
}

// isNoGroup reports whether err is Redis's NOGROUP (the stream or the group
// is gone), also from a script's call (which miniredis reports after a
// prefix of its own).
func isNoGroup(err error) bool {
	var re redis.Error
	return redis.HasErrorPrefix(err, "NOGROUP") || (errors.As(err, &re) && strings.Contains(re.Error(), ": NOGROUP "))
}

// read takes up to a batch of new events from each of the shards, and
// from each of visit (the safety poll) also the count of the group's
// entries pending there, in one pipeline. With budget >= 0 it reads at most
// budget events in all (readCounts): a shard left unread stays busy, to be
// read at a later round.
func (c *consumer) read(ctx context.Context, shards, visit []int, budget int) []delivery {
	if len(shards)+len(visit) == 0 {
		return nil
	}
	shards = append(shards, visit...)
	counts := c.readCounts(shards, budget)
	pipe := c.set.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(shards))
	pending := make([]*redis.XPendingCmd, len(visit))
	for k, i := range shards {
		if counts[k] > 0 {
			cmds[k] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: c.group, Consumer: c.name, Streams: []string{c.set.shards[i].events, ">"},
				Count: int64(counts[k]), Block: -1,
			})
		}
	}
	for k, i := range visit {
		pending[k] = pipe.XPending(ctx, c.set.shards[i].events, c.group)
	}
	at := time.Now()
	_, _ = pipe.Exec(ctx) // errors are read per command
	var out []delivery
	for k, i := range shards {
		sh := &c.shards[i]
		var res []redis.XStream
		var err error
		if cmds[k] != nil {
			res, err = cmds[k].Result()
		}
		if errors.Is(err, redis.Nil) {
			err = nil // nothing new
		}
		if v := k - (len(shards) - len(visit)); v >= 0 && err == nil {
			var p *redis.XPending
			p, err = pending[v].Result()
			if errors.Is(err, redis.Nil) {
				p, err = &redis.XPending{}, nil
			}
			if err == nil {
				sh.nextVisit = nextPoll(sh.grid, at, c.safety)
				if p.Count > 0 && !sh.active {
					sh.active = true
					sh.nextClaim = at
				} else if p.Count == 0 {
					sh.active = false
				}
			}
		}
		if err != nil {
			c.fail(ctx, i, fmt.Errorf("expset: read %s: %w", c.set.shards[i].events, err))
			continue
		}
		sh.bo.ok()
		if cmds[k] == nil {
			sh.busy = true // not read for want of budget: read it later
			continue
		}
		sh.busy = false
		for _, st := range res {
			for _, m := range st.Messages {
				sh.busy = true
				out = append(out, delivery{shard: i, id: m.ID, values: m.Values, at: at})
			}
		}
	}
	return out
}

// claim takes over one batch of shard i's events (at most budget, when >=
// 0) left pending longer than the lease TTL; the script buries those with
// every attempt used, and the rest are returned for delivery.
func (c *consumer) claim(ctx context.Context, i, budget int) ([]delivery, error) {
	sk := &c.set.shards[i]
	sh := &c.shards[i]
	reason := fmt.Sprintf("the last handler call did not finish: its consumer stopped renewing the lease for %v (it died, or lost Redis)", c.cfg.visibility)
	at := time.Now()
	v, err := c.set.run(ctx, "claim", i, scriptClaim, []string{sk.events, sk.dead, sk.att},
		c.group, c.name, c.visMs, sh.cursor, readCount(c.cfg.batch, budget), c.cfg.maxAttempts, reason)
	if err != nil {
		return nil, err
	}
	xs, ok := v.([]any)
	if !ok || len(xs) < 1 {
		return nil, unexpected("claim.lua", v)
	}
	cursor, ok := asString(xs[0])
	if !ok {
		return nil, unexpected("claim.lua", v)
	}
	from := sh.cursor
	sh.cursor = cursor
	sh.nextClaim = time.Now()
	if cursor == "0-0" {
		sh.nextClaim = sh.nextClaim.Add(c.claimEvery)
	}
	sh.nextClaim = c.claimScan(i, from, cursor, at, sh.nextClaim)
	var out []delivery
	for _, e := range xs[1:] {
		id, used, buried, values, ok := parseClaimed(e)
		if !ok {
			return out, unexpected("claim.lua", v)
		}
		if buried {
			c.event(ctx, i, used, errors.New(reason), true)
			continue
		}
		out = append(out, delivery{shard: i, id: id, values: values, at: at})
	}
	return out, nil
}

// parseClaimed reads one {id, attempts used, buried, {field, value, ...}} of
// claim.lua.
func parseClaimed(v any) (id string, used int, buried bool, values map[string]any, ok bool) {
	e, ok := v.([]any)
	if !ok || len(e) != 4 {
		return "", 0, false, nil, false
	}
	id, ok1 := asString(e[0])
	n, ok2 := asInt64(e[1])
	b, ok3 := asInt64(e[2])
	fs, ok4 := e[3].([]any)
	values, ok5 := fieldMap(fs)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return "", 0, false, nil, false
	}
	return id, int(n), b == 1, values, true
}

// fieldMap reads a stream entry's {field, value, ...} from a script's
// reply.
func fieldMap(fs []any) (map[string]any, bool) {
	if len(fs)%2 != 0 {
		return nil, false
	}
	values := make(map[string]any, len(fs)/2)
	for j := 0; j < len(fs); j += 2 {
		k, ok := asString(fs[j])
		if !ok {
			return nil, false
		}
		values[k] = fs[j+1]
	}
	return values, true
}

// deliverAll hands the events to the handler one by one. A shard that
// fails has its remaining events skipped: they stay pending, uncharged, and
// come back by claim. When ctx ends, the events not yet handed out are
// released for prompt redelivery.
func (c *consumer) deliverAll(ctx context.Context, todo []delivery) {
	failed := map[int]bool{}
	for k, d := range todo {
		if ctx.Err() != nil {
			c.release(ctx, todo[k:], failed)
			break
		}
		if failed[d.shard] {
			continue
		}
		err := c.deliver(ctx, d)
		if errors.Is(err, errAcksPending) {
			// No handler call while an acknowledgement waits (its shard
			// backs off, reported): the rest go back, uncharged.
			c.release(ctx, todo[k+1:], failed)
			break
		}
		if err != nil {
			failed[d.shard] = true
			c.fail(ctx, d.shard, err)
		}
	}
	_ = c.flushAcks(ctx)
}

// deliver makes one handler call of d (or none, when another consumer holds
// it or it is not meant for this group) and settles the outcome. Only Redis
// errors are returned.
func (c *consumer) deliver(ctx context.Context, d delivery) error {
	e, leased, token, err := c.start(ctx, d)
	if err != nil || e.Attempt <= 0 {
		return err
	}
	leased, herr := c.call(ctx, d.shard, d.id, e, leased)
	if herr == nil {
		c.handled(ctx, d.shard, d.id, e.Attempt, leased)
		return nil
	}
	return c.failed(ctx, d, e.Attempt, token, herr)
}

// start begins the handler call of d (Consume's, or the Reservation
// Reserve returns): it returns the event with its attempt, when its lease
// started and the call's token; an event with Attempt 0 when there is no
// call to make: another consumer holds it, its last attempt never finished
// (a claim buries it), it is not meant for this group (acknowledged) or is
// not an event at all (buried). Only Redis errors are returned.
func (c *consumer) start(ctx context.Context, d delivery) (Expiry, time.Time, string, error) {
	if g, ok := d.values["g"].(string); ok && g != c.group {
		// A dead letter of another group, kicked back: not for this one.
		c.bufferAck(ctx, d.shard, d.id, d.at)
		return Expiry{}, d.at, "", nil
	}
	e, perr := parseExpiry(d.shard, redis.XMessage{ID: d.id, Values: d.values}, 0)
	if perr != nil {
		// Not an event at all: no handler call can mend it.
		buried, err := c.bury(ctx, d.shard, d.id, 0, perr.Error())
		if buried {
			c.event(ctx, d.shard, 0, perr, true)
		}
		return Expiry{}, d.at, "", err
	}
	attempt, leased, token, err := c.begin(ctx, d)
	if err != nil || attempt <= 0 {
		return Expiry{}, leased, token, err
	}
	e.Attempt = attempt
	return e, leased, token, nil
}

// handled settles a handler call of attempt that returned nil, under a
// lease last renewed at leased: the event's acknowledgement waits in the
// buffer (bufferAck).
func (c *consumer) handled(ctx context.Context, shard int, id string, attempt int, leased time.Time) {
	c.event(ctx, shard, attempt, nil, false)
	c.bufferAck(ctx, shard, id, leased)
	if attempt >= c.cfg.maxAttempts {
		// The last attempt: a claim of the event after a crash would
		// take its call for one that never returned and bury it, so its
		// acknowledgement goes now, with those waiting.
		_ = c.flushAcks(ctx) // reported there
	}
}

// failed settles a handler call of d, attempt, whose call token is token,
// that returned herr (not nil), even when ctx has just ended. It touches
// nothing of the consumer but Redis (the calls of a Consume
// WithConcurrency run it on their own goroutines) and returns only Redis
// errors.
func (c *consumer) failed(ctx context.Context, d delivery, attempt int, token string, herr error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	switch {
	case handlerBuries(herr):
		// The handler buried it (Bury): at once, whatever attempts are left.
		buried, err := c.bury(wctx, d.shard, d.id, 0, herr.Error())
		c.event(ctx, d.shard, attempt, herr, buried)
		return err
	case ctx.Err() != nil:
		// Consume is stopping: the failure is not the event's, so the
		// attempt is given back and the event released.
		c.event(ctx, d.shard, attempt, herr, false)
		return c.releaseShard(wctx, d.shard, []string{d.id}, d.id, token)
	case attempt >= c.cfg.maxAttempts:
		buried, err := c.bury(wctx, d.shard, d.id, c.cfg.maxAttempts, herr.Error())
		c.event(ctx, d.shard, attempt, herr, buried)
		return err
	default:
		// Delivered again after its retry delay (retry.go).
		c.event(ctx, d.shard, attempt, herr, false)
		return c.retry(wctx, d.shard, d.id, c.retryDelay(herr, attempt))
	}
}

func (c *consumer) leaseKeys(shard int) []string {
	sk := &c.set.shards[shard]
	return []string{sk.events, sk.att}
}

// begin starts the handler call of d, in one round trip with the
// acknowledgements waiting when they are due: it returns the attempt
// number, 0 when another consumer holds the event, -1 when its every
// attempt is used, when the lease taken started (at the latest), and the
// call's token. The token makes the begin count once however often the
// client sends it (go-redis retries a call that timed out, and the server
// may run both); when the outcome stays unknown (an error), the attempt
// the token may have counted is given back.
func (c *consumer) begin(ctx context.Context, d delivery) (int, time.Time, string, error) {
	// Not cut short by ctx: an attempt counted is an attempt handed out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	leased := time.Now()
	var acks []*scriptCall
	if c.acksDue(leased) {
		acks = c.ackCalls()
	}
	b, token := c.beginCall(d)
	c.set.runPipelined(ctx, append(acks, b))
	ackErr := c.ackDone(ctx, acks)
	if b.err != nil {
		// It may have counted: give that back (once, whatever ran).
		_ = c.releaseShard(ctx, d.shard, []string{d.id}, d.id, token) // b.err is reported
		return 0, leased, token, b.err
	}
	n, taken, ok := parseBegin(b.v)
	if !ok {
		return 0, leased, token, unexpected("begin.lua", b.v)
	}
	if !taken {
		// The lease of the read or claim that took d runs on.
		leased = d.at
	}
	if ackErr != nil {
		// An acknowledgement failed: handle nothing new until it is
		// through, lest the handled event's lease run out unrenewed
		// while another handler call runs. The attempt is given back.
		if n > 0 {
			if err := c.releaseShard(ctx, d.shard, []string{d.id}, d.id, token); err != nil {
				return 0, leased, token, err
			}
		}
		return 0, leased, token, errAcksPending
	}
	return int(n), leased, token, nil
}

// beginCall returns the begin.lua call that starts a handler call of d,
// and the call's token.
func (c *consumer) beginCall(d delivery) (*scriptCall, string) {
	token := callToken()
	args := []any{c.group, c.name, d.id, "b", c.visMs, c.cfg.maxAttempts, c.visMs / 6, token}
	return &scriptCall{op: "begin", shard: d.shard, sc: scriptBegin, keys: c.leaseKeys(d.shard), args: args}, token
}

// callToken returns a new handler call's token.
func callToken() string { return strconv.FormatUint(rand.Uint64(), 36) }

// beginFull is the reply of begins.lua and take.lua for an event whose
// owner holds its every slot (WithOwnerConcurrency).
const beginFull = -2

// parseBegin reads a begin reply of begin.lua mode b or begins.lua: {attempt, taken now (0/1)},
// or 0, -1 or -2.
func parseBegin(v any) (n int64, taken, ok bool) {
	if xs, isList := v.([]any); isList {
		if len(xs) != 2 {
			return 0, false, false
		}
		n, ok1 := asInt64(xs[0])
		t, ok2 := asInt64(xs[1])
		return n, t == 1, ok1 && ok2 && n > 0
	}
	n, ok = asInt64(v)
	return n, false, ok && n <= 0
}

// bufferAck adds id, of shard, whose lease started at leased, to the
// acknowledgements waiting, to be sent within maxAckDelay and before its
// lease has run for a third of the lease TTL; a shard's full batch
// is sent at once.
func (c *consumer) bufferAck(ctx context.Context, shard int, id string, leased time.Time) {
	if c.addAck(shard, id, leased) {
		_ = c.flushAcks(ctx)
	}
}

// addAck adds id to the acknowledgements waiting (see bufferAck) and
// reports whether its shard's batch is full.
func (c *consumer) addAck(shard int, id string, leased time.Time) (full bool) {
	c.acks[shard] = append(c.acks[shard], id)
	due := time.Now().Add(maxAckDelay)
	if l := leased.Add(c.beat); l.Before(due) {
		due = l
	}
	if c.ackDue.IsZero() || due.Before(c.ackDue) {
		c.ackDue = due
	}
	return len(c.acks[shard]) >= maxBatch
}

// acksDue reports whether acknowledgements wait and must be sent at now.
func (c *consumer) acksDue(now time.Time) bool {
	return !c.ackDue.IsZero() && !now.Before(c.ackDue)
}

// errAcksPending stops a batch: an acknowledgement failed (and was
// reported).
var errAcksPending = errors.New("expset: acknowledgements pending")

// ackCalls returns the ack.lua calls for the acknowledgements waiting.
func (c *consumer) ackCalls() []*scriptCall {
	var calls []*scriptCall
	for i, ids := range c.acks {
		for len(ids) > 0 {
			batch := ids[:min(len(ids), maxBatch)]
			ids = ids[len(batch):]
			args := make([]any, 0, len(batch)+1)
			args = append(args, c.group)
			for _, id := range batch {
				args = append(args, id)
			}
			sk := &c.set.shards[i]
			sc, keys := c.withSlots(i, scriptAck, scriptAckSlots, sk.events, sk.att)
			calls = append(calls, &scriptCall{op: "ack", shard: i, sc: sc, keys: keys, args: args})
		}
	}
	return calls
}

// ackDone drops the acknowledgements that went through; those that failed
// stay, their shards back off, and the first error is returned.
func (c *consumer) ackDone(ctx context.Context, calls []*scriptCall) error {
	var first error
	for _, a := range c.ackSettle(calls) {
		c.fail(ctx, a.shard, a.err)
		if first == nil {
			first = a.err
		}
	}
	return first
}

// ackSettle drops the acknowledgements of calls (all of them, when calls
// holds every one waiting, as ackCalls made them) that went through, keeps
// those that failed and returns their calls.
func (c *consumer) ackSettle(calls []*scriptCall) []*scriptCall {
	if len(calls) == 0 {
		return nil
	}
	c.clearAcks()
	return c.requeueAcks(calls)
}

// clearAcks empties the acknowledgement buffer.
func (c *consumer) clearAcks() {
	for i := range c.acks {
		c.acks[i] = c.acks[i][:0]
	}
	c.ackDue = time.Time{}
}

// requeueAcks puts the acknowledgements of the calls that failed back in
// the buffer, due at once (but those of a stream that is gone: nothing to
// acknowledge there), and returns the calls that failed.
func (c *consumer) requeueAcks(calls []*scriptCall) []*scriptCall {
	var failed []*scriptCall
	for _, a := range calls {
		if a.err == nil {
			continue
		}
		failed = append(failed, a)
		if isNoGroup(a.err) {
			// The stream is gone, and the event with it: nothing to
			// acknowledge.
			continue
		}
		for _, id := range a.args[1:] {
			c.acks[a.shard] = append(c.acks[a.shard], id.(string))
		}
	}
	if c.acksWaiting() && c.ackDue.IsZero() {
		c.ackDue = time.Now()
	}
	return failed
}

// acksWaiting reports whether any acknowledgement waits.
func (c *consumer) acksWaiting() bool {
	for _, ids := range c.acks {
		if len(ids) > 0 {
			return true
		}
	}
	return false
}

// flushAcks sends the acknowledgements waiting, even when ctx has just
// ended; a failure is reported (its shard backs off), and the first is
// returned.
func (c *consumer) flushAcks(ctx context.Context) error {
	acks := c.ackCalls()
	if len(acks) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	c.set.runPipelined(wctx, acks)
	return c.ackDone(ctx, acks)
}

// bury dead-letters d if it is still this consumer's with at least need
// attempts used.
func (c *consumer) bury(ctx context.Context, shard int, id string, need int, reason string) (bool, error) {
	sk := &c.set.shards[shard]
	sc, keys := c.withSlots(shard, scriptBury, scriptBurySlots, sk.events, sk.dead, sk.att)
	v, err := c.set.run(ctx, "bury", shard, sc, keys, c.group, c.name, id, need, reason)
	n, _ := asInt64(v)
	return n == 1, err
}

// release hands the deliveries of the shards not failed back for prompt
// redelivery, even when ctx has just ended.
func (c *consumer) release(ctx context.Context, ds []delivery, failed map[int]bool) {
	byShard := map[int][]string{}
	for _, d := range ds {
		if !failed[d.shard] {
			byShard[d.shard] = append(byShard[d.shard], d.id)
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	for i, ids := range byShard {
		_ = c.releaseShard(wctx, i, ids, "", "") // ctx has ended: nothing to report to
	}
}

// releaseShard releases ids of shard (see release.lua), and gives back the
// attempt of refund's call whose token is token.
func (c *consumer) releaseShard(ctx context.Context, shard int, ids []string, refund, token string) error {
	for len(ids) > 0 {
		batch := ids[:min(len(ids), maxBatch)]
		ids = ids[len(batch):]
		args := []any{c.group, c.name, c.visMs, refund, token}
		for _, id := range batch {
			args = append(args, id)
		}
		sc, keys := c.withSlots(shard, scriptRelease, scriptReleaseSlots, c.leaseKeys(shard)...)
		if _, err := c.set.run(ctx, "release", shard, sc, keys, args...); err != nil {
			return err
		}
	}
	return nil
}

// prune removes the group's consumers of shard i that hold nothing and were
// idle at least idleMs (< 0: none by idle time), and leaving if it holds
// nothing there.
func (c *consumer) prune(ctx context.Context, i int, idleMs int64, leaving string) error {
	p := c.pruneCall(i, idleMs, leaving)
	_, err := c.set.run(ctx, p.op, p.shard, p.sc, p.keys, p.args...)
	return err
}

func (c *consumer) pruneCall(i int, idleMs int64, leaving string) *scriptCall {
	idle := ""
	if idleMs >= 0 {
		idle = strconv.FormatInt(idleMs, 10)
	}
	return &scriptCall{op: "prune", shard: i, sc: scriptPrune, keys: []string{c.set.shards[i].events}, args: []any{c.group, idle, leaving}}
}

// stop settles what a stopping Consume leaves: acknowledgements waiting,
// and its own entry in each shard's group when it holds nothing there (one
// pipeline for every shard).
func (c *consumer) stop(ctx context.Context) {
	_ = c.flushAcks(ctx)
	c.releaseParked(ctx)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	var calls []*scriptCall
	for i := range c.shards {
		if c.shards[i].grouped {
			calls = append(calls, c.pruneCall(i, -1, c.name))
		}
	}
	if len(calls) > 0 {
		// Best effort: ctx has ended, so there is no one to report to; a
		// periodic prune of another consumer finishes what fails here.
		c.set.runPipelined(wctx, calls)
	}
}

// event reports one handler call, or one burial without a call, to
// Hooks.OnEvent.
func (c *consumer) event(ctx context.Context, shard, attempt int, err error, buried bool) {
	if h := c.set.hooks.OnEvent; h != nil {
		h(ctx, CallInfo{Set: c.set.name, Op: "event", Shard: shard, Err: err}, EventInfo{Group: c.group, Attempt: attempt, DeadLettered: buried})
	}
}

// WithConsumerGroups declares the consumer groups that consume the set's
// expiry events (the set needs WithExpiryEvents; names of 1 to
// 256 bytes). Open creates each group on every shard's stream,
// starting at the oldest event retained, so that events are kept for a group
// from then on, even before its first Consume runs: an event leaves its
// stream only once every group on it has handled or dead-lettered it. A
// Consume that finds a shard's stream deleted makes it again with these
// groups and its own. Groups not declared are created by their first
// Consume, from the oldest event still retained then. Default: none; no
// names declares none.
func WithConsumerGroups(groups ...string) OpenOption {
	return openOption(func(c *setConfig) error {
		for _, g := range groups {
			if g == "" || len(g) > maxConsumerLen {
				return fmt.Errorf("%w: WithConsumerGroups: group %q must be 1 to %d bytes", ErrInvalidArgument, g, maxConsumerLen)
			}
		}
		c.groups = append(c.groups, groups...)
		return nil
	})
}

// createGroups creates group and the set's declared groups on shard i's
// stream (and the stream, when missing), starting at its oldest entry; a
// group that exists is left as it is.
func (s *Set) createGroups(ctx context.Context, i int, group string) error {
	groups := s.groups
	if group != "" {
		groups = append([]string{group}, s.groups...)
	}
	key := s.shards[i].events
	for _, g := range groups {
		err := s.rdb.XGroupCreateMkStream(ctx, key, g, "0").Err()
		if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return fmt.Errorf("expset: create group %q on %s: %w", g, key, err)
		}
	}
	return nil
}

// makeGroups creates the consumer's group and the declared groups on shard
// i's stream (createGroups), unless a Reserve of the set made them there
// already (the consumer is Reserve's).
func (c *consumer) makeGroups(ctx context.Context, i int) error {
	if c.reserving != nil && c.reserving.isGrouped(c.group, i) {
		return nil
	}
	if err := c.set.createGroups(ctx, i, c.group); err != nil {
		return err
	}
	if c.reserving != nil {
		c.reserving.grouped(c.group, i, len(c.shards), true)
	}
	return nil
}

// declareGroups creates the declared groups on every shard's stream.
func (s *Set) declareGroups(ctx context.Context) error {
	if len(s.groups) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, sk := range s.shards {
		for _, g := range s.groups {
			pipe.XGroupCreateMkStream(ctx, sk.events, g, "0")
		}
	}
	cmds, _ := pipe.Exec(ctx)
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return fmt.Errorf("expset: open %q: create consumer group: %w", s.name, err)
		}
	}
	return nil
}

// call makes one handler call of e under a lease taken at leased: every
// c.beat from leased until the handler returns, begin.lua renews the entry's
// idle time in the group's pending list, if this consumer still holds it.
// The handler's context ends with ctx, when a renewal finds the event held
// by another consumer or acknowledged (cause ErrLeaseLost), or after
// WithMaxHandlingTime (cause context.DeadlineExceeded). Renewals go on after
// that, until the handler returns: no other consumer takes an event whose
// handler call is still running. A renewal that fails for a Redis error is
// reported and tried again at the next beat. Acknowledgements waiting are
// sent when they are due while the call runs (see flushDuringCall). call
// returns when the last renewal that succeeded was sent, and the handler's
// error.
func (c *consumer) call(ctx context.Context, shard int, id string, e Expiry, leased time.Time) (time.Time, error) {
	hctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	hctx, cancel := context.WithTimeout(hctx, c.cfg.maxHandling)
	defer cancel()

	var (
		mu      sync.Mutex
		stopped bool
		running sync.WaitGroup
		timer   *time.Timer
		flush   *time.Timer
	)
	// every runs f on its own goroutine after d, then again after what f
	// returns (when > 0), until the handler has returned.
	every := func(d time.Duration, f func() time.Duration) *time.Timer {
		var t *time.Timer
		run := func() {
			defer running.Done()
			next := f()
			mu.Lock()
			if !stopped && next > 0 {
				running.Add(1)
				t.Reset(next)
			}
			mu.Unlock()
		}
		mu.Lock()
		defer mu.Unlock()
		running.Add(1)
		t = time.AfterFunc(d, run)
		return t
	}
	// The first renewal comes a beat after the lease began (the read's,
	// when the call kept it), the next ones a beat apart.
	timer = every(max(c.beat-time.Since(leased), 0), func() time.Duration {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(c.beat, time.Second))
		held, err := c.renew(rctx, shard, id)
		cancel()
		if err != nil {
			c.set.reportError(ctx, "consume", shard, err, c.beat)
		} else if !held {
			lost(ErrLeaseLost)
		} else {
			mu.Lock()
			leased = sent
			mu.Unlock()
		}
		return c.beat
	})
	if !c.ackDue.IsZero() {
		// Consume's goroutine touches c.acks again only once this timer's
		// runs are over (running.Wait below).
		flush = every(max(time.Until(c.ackDue), 0), func() time.Duration {
			return c.flushDuringCall(ctx)
		})
	}

	err := c.handle(hctx, e)

	mu.Lock()
	stopped = true
	for _, t := range []*time.Timer{timer, flush} {
		if t != nil && t.Stop() {
			running.Done() // the run scheduled will not happen
		}
	}
	l := leased
	mu.Unlock()
	running.Wait()
	return l, err
}

// renew extends this consumer's lease on event id of shard (begin.lua mode
// t), one round trip: false when it no longer holds it.
func (c *consumer) renew(ctx context.Context, shard int, id string) (bool, error) {
	sc, keys := c.withSlots(shard, scriptBegin, scriptBeginSlots, c.leaseKeys(shard)...)
	v, err := c.set.run(ctx, "renew", shard, sc, keys, c.group, c.name, id, "t", c.visMs)
	if err != nil {
		return false, err
	}
	n, _ := asInt64(v)
	return n == 1, nil
}

// flushDuringCall sends the acknowledgements waiting while a handler call
// runs, so that a handled event's lease does not lapse in the buffer
// however long the call lasts. A failure is reported and tried again a beat
// later (the returned wait; 0 once all went through); what is still waiting
// when the call returns goes with the next handler call's start.
func (c *consumer) flushDuringCall(ctx context.Context) time.Duration {
	acks := c.ackCalls()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	c.set.runPipelined(wctx, acks)
	cancel()
	failed := c.ackSettle(acks)
	for _, a := range failed {
		c.set.reportError(ctx, "consume", a.shard, a.err, c.beat)
	}
	if c.acksWaiting() {
		return c.beat
	}
	return 0
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
