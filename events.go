package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Consume defaults and limits.
const (
	DefaultVisibilityTimeout = 30 * time.Second       // WithVisibilityTimeout
	DefaultMaxAttempts       = 5                      // WithMaxAttempts
	DefaultReadBatch         = 10                     // WithReadBatch
	DefaultPollInterval      = 100 * time.Millisecond // WithPollInterval
	MaxConsumerLen           = 256                    // bytes in a consumer group or consumer name
)

// AllShards asks DeadLetters for the dead letters of every shard.
const AllShards = -1

// Expiry is one expiry event: member of owner reached its deadline and was
// removed. It is delivered at least once: a handler should be idempotent, for
// instance by keying its work on Owner, Member and Deadline. ID alone is not
// such a key: the shards' streams are separate, so two shards' events can
// carry the same ID, and a kicked dead letter comes back with a new one.
type Expiry struct {
	Owner    string
	Member   string
	Deadline time.Time // the deadline the member had, to the millisecond (not reached when evicted)
	Reason   Reason    // ReasonExpired, or ReasonEvicted for a member WithEvictOldest evicted
	Attempt  int       // 1 on first delivery, 2 on the first redelivery, ...
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
}

// WithVisibilityTimeout sets how long an event delivered to a handler stays
// invisible to other consumers (default DefaultVisibilityTimeout, 30s; 1ms to
// 24h). An event whose handler failed, or whose consumer died, is delivered
// again once this long has passed since its delivery. The handler's context
// ends after it: a handler still running then may see the event handled
// twice.
func WithVisibilityTimeout(d time.Duration) ConsumeOption {
	return func(c *consumeConfig) {
		if c.ok(inRange("WithVisibilityTimeout", d, time.Millisecond, 24*time.Hour)) {
			c.visibility = d
		}
	}
}

// WithMaxAttempts sets how many deliveries an event gets before it moves to
// the dead-letter stream (default DefaultMaxAttempts, 5; 1 to 1000). With 1,
// the first failure buries it.
func WithMaxAttempts(n int) ConsumeOption {
	return func(c *consumeConfig) {
		if c.ok(inRange("WithMaxAttempts", n, 1, 1000)) {
			c.maxAttempts = n
		}
	}
}

// WithReadBatch sets how many events one read takes from each shard's
// stream (default DefaultReadBatch, 10; 1 to 1000). Events read wait their
// turn for the handler, and their visibility timeout runs meanwhile: keep
// batch times shards times the handler's time well under it.
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

// consumer is the state of one Consume call.
type consumer struct {
	set            *Set
	group, name    string
	handle         func(context.Context, Expiry) error
	cfg            consumeConfig
	cursor         []string    // per shard: where the next claim starts
	nextClaim      []time.Time // per shard: when to look for events to claim
	claimEvery     time.Duration
	visibilityArgs int64 // visibility in ms
}

// Consume delivers the set's expiry events to handle until ctx ends, as
// consumer of the consumer group group (created on each shard's stream when
// missing). Several consumers, in any processes, may share a group: each
// event goes to one of them. Use one group per set: an event is deleted from
// its stream once handled, so a second group would miss it.
//
// handle runs in Consume's goroutine, one event at a time, with a context
// that ends with ctx or after the visibility timeout. When it returns nil the
// event is acknowledged and deleted in one step. When it fails, or the
// process dies before it returns, the event stays pending and is delivered
// again, with Attempt one higher, once the visibility timeout has passed
// since its delivery. An event whose attempt WithMaxAttempts fails, or that
// is still unacknowledged after that many deliveries, moves to the shard's
// dead-letter stream with its last error (see DeadLetters, Kick).
//
// Each shard's stream is read on its own (on Redis Cluster the shards live on
// different nodes): one pipelined, non-blocking read of every shard, then a
// wait of WithPollInterval when all were empty. Events of one shard arrive in
// the order they expired, except redeliveries.
//
// Consume returns nil when ctx ends, having started no goroutine, and returns
// an error for an invalid argument (ErrInvalidConsumer, ErrInvalidOption,
// ErrNoEvents) or a Redis error while creating the groups, after which it may
// be called again: nothing is lost. A Redis error in a later round is
// reported (Hooks.OnError, else log/slog) and the round retried after a
// backoff. Options: WithVisibilityTimeout, WithMaxAttempts,
// WithReadBatch, WithPollInterval.
func (s *Set) Consume(ctx context.Context, group, consumerName string, handle func(context.Context, Expiry) error, opts ...ConsumeOption) error {
	c, err := s.newConsumer(group, consumerName, handle, opts)
	if err != nil {
		return err
	}
	if err := c.createGroups(ctx); err != nil {
		return c.end(ctx, err)
	}
	return s.loop(ctx, "consume", func() (time.Duration, error) {
		n, err := c.round(ctx)
		if err != nil {
			return 0, c.end(ctx, err)
		}
		if n > 0 {
			return 0, nil
		}
		return c.cfg.poll, nil
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
		if n == "" || len(n) > MaxConsumerLen {
			return nil, fmt.Errorf("%w: %q must be 1 to %d bytes", ErrInvalidConsumer, n, MaxConsumerLen)
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
	}
	applyOptions(&cfg, opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	c := &consumer{
		set: s, group: group, name: name, handle: handle, cfg: cfg,
		cursor:         make([]string, len(s.shards)),
		nextClaim:      make([]time.Time, len(s.shards)),
		claimEvery:     min(max(cfg.visibility/4, cfg.poll), 5*time.Second),
		visibilityArgs: max(cfg.visibility.Milliseconds(), 1),
	}
	for i := range c.cursor {
		c.cursor[i] = "0-0"
	}
	return c, nil
}

// end maps an error that ended Consume: nil once ctx has ended.
func (c *consumer) end(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (c *consumer) createGroups(ctx context.Context) error {
	for _, sk := range c.set.shards {
		err := c.set.rdb.XGroupCreateMkStream(ctx, sk.events, c.group, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("expset: create group %q on %s: %w", c.group, sk.events, err)
		}
	}
	return nil
}

// round claims what is due for redelivery, then reads and handles new
// events of every shard; it returns how many events it handled.
func (c *consumer) round(ctx context.Context) (int, error) {
	handled := 0
	for i := range c.set.shards {
		if time.Now().Before(c.nextClaim[i]) {
			continue
		}
		n, err := c.claim(ctx, i)
		handled += n
		if err != nil {
			return handled, err
		}
	}

	pipe := c.set.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(c.set.shards))
	for i, sk := range c.set.shards {
		cmds[i] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: c.group, Consumer: c.name, Streams: []string{sk.events, ">"},
			Count: int64(c.cfg.batch), Block: -1,
		})
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	read := time.Now()
	for i, cmd := range cmds {
		res, err := cmd.Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil && strings.HasPrefix(err.Error(), "NOGROUP"):
			// The stream was deleted under us: make it and the group again.
			if err := c.createGroups(ctx); err != nil {
				return handled, err
			}
			continue
		case err != nil:
			return handled, fmt.Errorf("expset: read %s: %w", c.set.shards[i].events, err)
		}
		for _, st := range res {
			for _, m := range st.Messages {
				if ctx.Err() != nil {
					return handled, nil
				}
				if time.Since(read) >= c.cfg.visibility {
					// Its visibility timeout ran out while it waited: another
					// consumer may hold it by now. It comes back by claim.
					continue
				}
				if err := c.deliver(ctx, i, m.ID, m.Values, 1); err != nil {
					return handled, err
				}
				handled++
			}
		}
	}
	return handled, nil
}

// claim takes over one batch of shard i's events left pending longer than
// the visibility timeout, and delivers them again (or buries those past the
// last attempt).
func (c *consumer) claim(ctx context.Context, i int) (int, error) {
	sk := &c.set.shards[i]
	v, err := c.set.run(ctx, "claim", scriptClaim, []string{sk.events},
		c.group, c.name, c.visibilityArgs, c.cursor[i], c.cfg.batch)
	if err != nil {
		return 0, err
	}
	xs, ok := v.([]any)
	if !ok || len(xs) < 1 {
		return 0, unexpected("claim.lua", v)
	}
	cursor, ok := asString(xs[0])
	if !ok {
		return 0, unexpected("claim.lua", v)
	}
	c.cursor[i] = cursor
	c.nextClaim[i] = time.Now()
	if cursor == "0-0" {
		c.nextClaim[i] = c.nextClaim[i].Add(c.claimEvery)
	}
	n := 0
	for _, e := range xs[1:] {
		id, attempt, values, ok := parseClaimed(e)
		if !ok {
			return n, unexpected("claim.lua", v)
		}
		if attempt > c.cfg.maxAttempts {
			// Its last attempt was never acknowledged: the consumer died or
			// overran the visibility timeout.
			reason := fmt.Sprintf("not acknowledged within the visibility timeout (%v) after %d deliveries", c.cfg.visibility, attempt-1)
			if err := c.bury(ctx, i, id, attempt-1, reason); err != nil {
				return n, err
			}
			continue
		}
		if err := c.deliver(ctx, i, id, values, attempt); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// parseClaimed reads one {id, deliveries, {field, value, ...}} of claim.lua.
func parseClaimed(v any) (id string, attempt int, values map[string]any, ok bool) {
	e, ok := v.([]any)
	if !ok || len(e) != 3 {
		return "", 0, nil, false
	}
	id, ok1 := asString(e[0])
	n, ok2 := asInt64(e[1])
	fs, ok3 := e[2].([]any)
	if !ok1 || !ok2 || !ok3 || len(fs)%2 != 0 {
		return "", 0, nil, false
	}
	values = make(map[string]any, len(fs)/2)
	for j := 0; j < len(fs); j += 2 {
		k, ok := asString(fs[j])
		if !ok {
			return "", 0, nil, false
		}
		values[k] = fs[j+1]
	}
	return id, int(n), values, true
}

// deliver hands one event to the handler and acknowledges it, buries it, or
// leaves it pending. Only Redis errors are returned.
func (c *consumer) deliver(ctx context.Context, shard int, id string, values map[string]any, attempt int) error {
	e, herr := parseExpiry(shard, redis.XMessage{ID: id, Values: values}, attempt)
	if herr == nil {
		hctx, cancel := context.WithTimeout(ctx, c.cfg.visibility)
		herr = c.handle(hctx, e)
		cancel()
	} else {
		attempt = c.cfg.maxAttempts // a malformed entry will not get better
	}
	pending := herr != nil && (attempt < c.cfg.maxAttempts || ctx.Err() != nil)
	if h := c.set.hooks.OnEvent; h != nil {
		h(EventInfo{Set: c.set.name, Shard: shard, Attempt: attempt, Err: herr, DeadLettered: herr != nil && !pending})
	}
	if pending {
		// Pending: delivered again after the visibility timeout. A failure
		// as Consume stops is left like a crash, not buried here.
		return nil
	}
	// Finish what the handler decided even when ctx has just ended.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if herr != nil {
		return c.bury(wctx, shard, id, attempt, herr.Error())
	}
	sk := &c.set.shards[shard]
	_, err := c.set.run(wctx, "ack", scriptAck, []string{sk.events}, c.group, id)
	return err
}

func (c *consumer) bury(ctx context.Context, shard int, id string, attempts int, reason string) error {
	sk := &c.set.shards[shard]
	_, err := c.set.run(ctx, "bury", scriptBury, []string{sk.events, sk.dead},
		c.group, c.name, id, attempts, reason)
	return err
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
