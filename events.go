package expset

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Consume defaults and limits.
const (
	DefaultVisibilityTimeout = 30 * time.Second       // WithVisibilityTimeout
	DefaultMaxAttempts       = 5                      // WithMaxAttempts
	DefaultReadBatch         = 10                     // WithReadBatch
	DefaultPollInterval      = 100 * time.Millisecond // WithPollInterval
	DefaultMaxHandlingTime   = time.Minute            // WithMaxHandlingTime
	MaxConsumerLen           = 256                    // bytes in a consumer group or consumer name
)

// AllShards asks DeadLetters for the dead letters of every shard.
const AllShards = -1

// Expiry is one expiry event: member of owner reached its deadline and was
// removed. Each consumer group receives it at least once: a handler should
// be idempotent, for instance by keying its work on Owner, Member and
// Deadline. ID alone is not such a key: the shards' streams are separate, so
// two shards' events can carry the same ID, and a kicked dead letter comes
// back with a new one.
type Expiry struct {
	Owner    string
	Member   string
	Deadline time.Time // the deadline the member had, to the millisecond (not reached when evicted)
	Reason   Reason    // ReasonExpired, or ReasonEvicted for a member WithEvictOldest evicted
	Attempt  int       // the handler call this is for the event in its group: 1 for the first, 2 for the second, ...
	Payload  []byte    // the member's payload (WithPayloads), nil when it had none
	Shard    int       // the shard whose stream carried it
	ID       string    // the entry's ID in the shard's event stream (unique with Shard)
}

// ConsumeOption configures one Consume call.
type ConsumeOption func(*consumeConfig)

type consumeConfig struct {
	optionErr
	visibility  time.Duration
	maxAttempts int
	batch       int
	poll        time.Duration
	maxHandling time.Duration
}

// WithVisibilityTimeout sets how long an event stays with a consumer that
// shows no sign of life (default DefaultVisibilityTimeout, 30s; 1ms to 24h).
// While a handler call runs, its consumer renews its lease on the event every
// third of this, so no other consumer takes it however long the call lasts
// (see WithMaxHandlingTime). An event whose consumer died, or lost Redis,
// goes to another consumer once this long has passed since the last renewal;
// an event whose handler failed comes again this long after the failure.
func WithVisibilityTimeout(d time.Duration) ConsumeOption {
	return func(c *consumeConfig) {
		if c.ok(inRange("WithVisibilityTimeout", d, time.Millisecond, 24*time.Hour)) {
			c.visibility = d
		}
	}
}

// WithMaxAttempts sets how many handler calls an event gets in a group
// before it moves to the dead-letter stream (default DefaultMaxAttempts, 5;
// 1 to 1000). With 1, the first failure buries it. Reading an event, holding
// it in a batch, skipping it and shutting down count no attempt.
func WithMaxAttempts(n int) ConsumeOption {
	return func(c *consumeConfig) {
		if c.ok(inRange("WithMaxAttempts", n, 1, 1000)) {
			c.maxAttempts = n
		}
	}
}

// WithReadBatch sets how many events one read takes from each shard's
// stream (default DefaultReadBatch, 10; 1 to 1000). Events read wait their
// turn for the handler; one that waited past the visibility timeout may be
// taken by another consumer meanwhile, and is then skipped here (no attempt
// is counted).
func WithReadBatch(n int) ConsumeOption {
	return func(c *consumeConfig) {
		if c.ok(inRange("WithReadBatch", n, 1, maxBatch)) {
			c.batch = n
		}
	}
}

// WithPollInterval sets how long Consume waits after finding every shard's
// stream empty (default DefaultPollInterval, 100ms; 1ms to 1m). Reads do not
// block in Redis, so this bounds both the idle load (one pipelined read of
// all shards per interval) and the added delivery latency.
func WithPollInterval(d time.Duration) ConsumeOption {
	return func(c *consumeConfig) {
		if c.ok(inRange("WithPollInterval", d, time.Millisecond, time.Minute)) {
			c.poll = d
		}
	}
}

// WithMaxHandlingTime bounds one handler call (default
// DefaultMaxHandlingTime, 1m; 1ms to 24h): the handler's context ends then,
// with context.Cause ErrHandlerTimeout. A call that returns an error after
// it counts as a failed attempt. The lease on the event is renewed until the
// call returns, whenever that is: a handler that ignores its context keeps
// the event (and its Consume) for as long as it runs.
func WithMaxHandlingTime(d time.Duration) ConsumeOption {
	return func(c *consumeConfig) {
		if c.ok(inRange("WithMaxHandlingTime", d, time.Millisecond, 24*time.Hour)) {
			c.maxHandling = d
		}
	}
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
// handle runs in Consume's goroutine, one event at a time. Each call is one
// attempt (Expiry.Attempt counts them, 1 on the first), made under a lease:
// while it runs, the event's lease is renewed every third of the visibility
// timeout, so no other consumer takes it, and the handler's context ends
// when ctx ends, when the lease is lost (context.Cause ErrHandlerLeaseLost),
// or after WithMaxHandlingTime (ErrHandlerTimeout). When handle returns nil
// the event is acknowledged (with the next event's start, in one round
// trip). When it fails, the event is delivered again, to any consumer of the
// group, once the visibility timeout has passed; when the call that fails is
// attempt WithMaxAttempts, the event moves to the shard's dead-letter stream
// with the error (see DeadLetters, Kick). An event whose last attempt never
// returned (the consumer died, or lost Redis for longer than the visibility
// timeout) is dead-lettered by the consumer that finds it. Nothing else is:
// an event that no handler call failed on is never dead-lettered, except an
// entry that cannot be read as an event at all, which is dead-lettered at
// once with attempt 0.
//
// Each shard's stream is read on its own (on Redis Cluster the shards live on
// different nodes): one pipelined, non-blocking read of every shard, then a
// wait of WithPollInterval when all were empty. Events of one shard arrive in
// the order they expired, except redeliveries.
//
// Consume keeps going through Redis failures: a failing shard is retried
// with capped exponential backoff while the others carry on, and every error
// goes to Hooks.OnError (by default, log/slog). A deleted stream (Drop, DEL,
// a restart without persistence) is made again with the group. When ctx
// ends, events read and not yet handed to handle go back for prompt
// redelivery with no attempt counted, handled events are acknowledged, and
// the consumer leaves its group when it holds nothing; Consume then returns
// nil. It returns an error only for misuse, at once: ErrInvalidConsumer,
// ErrInvalidOption, ErrNoEvents. Options: WithVisibilityTimeout,
// WithMaxAttempts, WithMaxHandlingTime, WithReadBatch, WithPollInterval.
func (s *Set) Consume(ctx context.Context, group, consumerName string, handle func(context.Context, Expiry) error, opts ...ConsumeOption) error {
	c, err := s.newConsumer(group, consumerName, handle, opts)
	if err != nil {
		return err
	}
	defer c.stop(ctx)
	return s.loop(ctx, "consume", func() (time.Duration, error) {
		return c.round(ctx), nil
	})
}

func (s *Set) newConsumer(group, name string, handle func(context.Context, Expiry) error, opts []ConsumeOption) (*consumer, error) {
	if err := s.opened(); err != nil {
		return nil, err
	}
	if !s.events {
		return nil, fmt.Errorf("%w: set %q", ErrNoEvents, s.name)
	}
	for _, n := range []string{group, name} {
		if err := validateConsumerName(n); err != nil {
			return nil, err
		}
	}
	if handle == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalidOption)
	}
	cfg := consumeConfig{
		visibility:  DefaultVisibilityTimeout,
		maxAttempts: DefaultMaxAttempts,
		batch:       DefaultReadBatch,
		poll:        DefaultPollInterval,
		maxHandling: DefaultMaxHandlingTime,
	}
	applyOptions(&cfg, opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	c := &consumer{
		set: s, group: group, name: name, handle: handle, cfg: cfg,
		shards:     make([]consumerShard, len(s.shards)),
		acks:       make([][]string, len(s.shards)),
		claimEvery: min(max(cfg.visibility/4, cfg.poll), 5*time.Second),
		pruneIdle:  2*cfg.visibility + 10*cfg.poll,
		visMs:      max(cfg.visibility.Milliseconds(), 1),
		beat:       max(cfg.visibility/3, time.Millisecond),
	}
	for i := range c.shards {
		c.shards[i].cursor = "0-0"
	}
	return c, nil
}

func validateConsumerName(n string) error {
	if n == "" || len(n) > MaxConsumerLen {
		return fmt.Errorf("%w: %q must be 1 to %d bytes", ErrInvalidConsumer, n, MaxConsumerLen)
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
	e.Reason, ok4 = parseReason(m.Values["r"])
	if !ok1 || !ok2 || !ok3 || !ok4 || err != nil {
		return e, fmt.Errorf("%w: malformed expiry event %s: %v", ErrUnexpectedReply, m.ID, m.Values)
	}
	e.Deadline = msTime(ms)
	if p, ok := m.Values["p"].(string); ok {
		e.Payload = []byte(p)
	}
	return e, nil
}
