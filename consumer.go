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

// finishTimeout bounds the Redis calls that settle an event after its
// handler returned, and those of a stopping Consume: they run even when ctx
// has just ended.
const finishTimeout = 5 * time.Second

// consumer is the state of one Consume call. It is used by Consume's
// goroutine only (the lease heartbeat touches none of it).
type consumer struct {
	set         *Set
	group, name string
	handle      func(context.Context, Expiry) error
	cfg         consumeConfig
	shards      []consumerShard
	acks        [][]string    // per shard: IDs handled (or not meant for the group), not yet acknowledged
	claimEvery  time.Duration // how often each shard's pending list is scanned for events to claim
	pruneIdle   time.Duration // consumers idle this long with nothing pending are removed
	visMs       int64         // the visibility timeout in ms
	beat        time.Duration // how often a handler call's lease is renewed
}

// consumerShard is what a consumer knows of one shard.
type consumerShard struct {
	grouped   bool      // the group is known to exist on the shard's stream
	cursor    string    // where the next claim scan starts
	nextClaim time.Time // when to scan for events to claim
	nextPrune time.Time // when to remove idle consumers
	retryAt   time.Time // the shard failed: leave it alone until then
	bo        backoff
}

// delivery is an event read or claimed, waiting for its handler call.
type delivery struct {
	shard  int
	id     string
	values map[string]any
}

// round does one pass over the shards that are not backing off: it makes
// missing groups, claims what is due, reads new events, and hands them all
// to the handler. It returns how long to wait before the next round.
func (c *consumer) round(ctx context.Context) time.Duration {
	c.flushAcks(ctx) // left over from a failure: before anything else
	var todo []delivery
	var read []int
	now := time.Now()
	for i := range c.shards {
		sh := &c.shards[i]
		if now.Before(sh.retryAt) {
			continue
		}
		if !sh.grouped {
			if err := c.set.createGroups(ctx, i, c.group); err != nil {
				c.fail(ctx, i, err)
				continue
			}
			sh.grouped = true
		}
		if !now.Before(sh.nextClaim) {
			ds, err := c.claim(ctx, i)
			if err != nil {
				c.fail(ctx, i, err)
				continue
			}
			todo = append(todo, ds...)
		}
		if !now.Before(sh.nextPrune) {
			if err := c.prune(ctx, i, c.pruneIdle.Milliseconds(), ""); err != nil {
				c.fail(ctx, i, err)
				continue
			}
			sh.nextPrune = now.Add(c.pruneIdle)
		}
		read = append(read, i)
	}
	todo = append(todo, c.read(ctx, read)...)
	c.deliverAll(ctx, todo)

	if len(todo) > 0 {
		return 0
	}
	wait := c.cfg.poll
	for i := range c.shards {
		if d := time.Until(c.shards[i].retryAt); d > 0 && d < wait {
			wait = d
		}
	}
	return wait
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
	}
	wait := sh.bo.fail()
	sh.retryAt = time.Now().Add(wait)
	c.set.reportError(ctx, "consume", i, err, wait)
}

func isNoGroup(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOGROUP")
}

// read takes up to a batch of new events from each of the shards, in one
// pipeline.
func (c *consumer) read(ctx context.Context, shards []int) []delivery {
	if len(shards) == 0 {
		return nil
	}
	pipe := c.set.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(shards))
	for k, i := range shards {
		cmds[k] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: c.group, Consumer: c.name, Streams: []string{c.set.shards[i].events, ">"},
			Count: int64(c.cfg.batch), Block: -1,
		})
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var out []delivery
	for k, i := range shards {
		res, err := cmds[k].Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			c.fail(ctx, i, fmt.Errorf("expset: read %s: %w", c.set.shards[i].events, err))
			continue
		}
		c.shards[i].bo.ok()
		for _, st := range res {
			for _, m := range st.Messages {
				out = append(out, delivery{shard: i, id: m.ID, values: m.Values})
			}
		}
	}
	return out
}

// claim takes over one batch of shard i's events left pending longer than
// the visibility timeout; the script buries those with every attempt used,
// and the rest are returned for delivery.
func (c *consumer) claim(ctx context.Context, i int) ([]delivery, error) {
	sk := &c.set.shards[i]
	sh := &c.shards[i]
	reason := fmt.Sprintf("the last handler call did not finish: its consumer stopped renewing the lease for %v (it died, or lost Redis)", c.cfg.visibility)
	v, err := c.set.run(ctx, "claim", i, scriptClaim, []string{sk.events, sk.dead, sk.att},
		c.group, c.name, c.visMs, sh.cursor, c.cfg.batch, c.cfg.maxAttempts, reason)
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
	sh.cursor = cursor
	sh.nextClaim = time.Now()
	if cursor == "0-0" {
		sh.nextClaim = sh.nextClaim.Add(c.claimEvery)
	}
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
		out = append(out, delivery{shard: i, id: id, values: values})
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
	if !ok1 || !ok2 || !ok3 || !ok4 || len(fs)%2 != 0 {
		return "", 0, false, nil, false
	}
	values = make(map[string]any, len(fs)/2)
	for j := 0; j < len(fs); j += 2 {
		k, ok := asString(fs[j])
		if !ok {
			return "", 0, false, nil, false
		}
		values[k] = fs[j+1]
	}
	return id, int(n), b == 1, values, true
}

// deliverAll hands the events to the handler one by one. A shard that
// fails has its remaining events skipped: they stay pending, uncharged, and
// come back by claim. When ctx ends, the events not yet handed out are
// released for prompt redelivery.
func (c *consumer) deliverAll(ctx context.Context, todo []delivery) {
	failed := map[int]bool{}
	for k, d := range todo {
		if ctx.Err() != nil {
			c.release(ctx, todo[k:], failed, "")
			break
		}
		if failed[d.shard] {
			continue
		}
		err := c.deliver(ctx, d)
		if errors.Is(err, errAcksPending) {
			// No handler call while an acknowledgement waits (its shard
			// backs off, reported): the rest go back, uncharged.
			c.release(ctx, todo[k+1:], failed, "")
			break
		}
		if err != nil {
			failed[d.shard] = true
			c.fail(ctx, d.shard, err)
		}
	}
	c.flushAcks(ctx)
}

// deliver makes one handler call of d (or none, when another consumer holds
// it or it is not meant for this group) and settles the outcome. Only Redis
// errors are returned.
func (c *consumer) deliver(ctx context.Context, d delivery) error {
	if g, ok := d.values["g"].(string); ok && g != c.group {
		// A dead letter of another group, kicked back: not for this one.
		c.acks[d.shard] = append(c.acks[d.shard], d.id)
		return nil
	}
	e, perr := parseExpiry(d.shard, redis.XMessage{ID: d.id, Values: d.values}, 0)
	if perr != nil {
		// Not an event at all: no handler call can mend it.
		buried, err := c.bury(ctx, d.shard, d.id, 0, perr.Error())
		if buried {
			c.event(ctx, d.shard, 0, perr, true)
		}
		return err
	}
	attempt, err := c.begin(ctx, d)
	if err != nil || attempt <= 0 {
		// Another consumer holds it, or its last attempt never finished
		// (a claim buries it): no call.
		return err
	}
	e.Attempt = attempt
	herr := c.call(ctx, d.shard, d.id, e)

	// Settle what the handler decided even when ctx has just ended.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	switch {
	case herr == nil:
		c.event(ctx, d.shard, attempt, nil, false)
		c.acks[d.shard] = append(c.acks[d.shard], d.id)
		if len(c.acks[d.shard]) >= maxBatch {
			c.flushAcks(ctx)
		}
		return nil
	case ctx.Err() != nil:
		// Consume is stopping: the failure is not the event's, so the
		// attempt is given back and the event released.
		c.event(ctx, d.shard, attempt, herr, false)
		return c.releaseShard(wctx, d.shard, []string{d.id}, d.id)
	case attempt >= c.cfg.maxAttempts:
		buried, err := c.bury(wctx, d.shard, d.id, c.cfg.maxAttempts, herr.Error())
		c.event(ctx, d.shard, attempt, herr, buried)
		return err
	default:
		// Delivered again once the visibility timeout has passed from now.
		c.event(ctx, d.shard, attempt, herr, false)
		_, err := c.set.run(wctx, "renew", d.shard, scriptBegin, c.leaseKeys(d.shard), c.group, c.name, d.id, "t")
		return err
	}
}

func (c *consumer) leaseKeys(shard int) []string {
	sk := &c.set.shards[shard]
	return []string{sk.events, sk.att}
}

// begin starts the handler call of d, in one round trip with the
// acknowledgements waiting: it returns the attempt number, 0 when another
// consumer holds the event, -1 when its every attempt is used.
func (c *consumer) begin(ctx context.Context, d delivery) (int, error) {
	// Not cut short by ctx: an attempt counted is an attempt handed out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	acks := c.ackCalls()
	b := &scriptCall{op: "begin", shard: d.shard, sc: scriptBegin, keys: c.leaseKeys(d.shard),
		args: []any{c.group, c.name, d.id, "b", c.visMs, c.cfg.maxAttempts}}
	c.set.runPipelined(ctx, append(acks, b))
	ackErr := c.ackDone(ctx, acks)
	if b.err != nil {
		return 0, b.err
	}
	n, ok := asInt64(b.v)
	if !ok {
		return 0, unexpected("begin.lua", b.v)
	}
	if ackErr != nil {
		// An acknowledgement failed: handle nothing new until it is
		// through, lest the handled event's lease run out unrenewed
		// while another handler call runs. The attempt is given back.
		if n > 0 {
			if err := c.releaseShard(ctx, d.shard, []string{d.id}, d.id); err != nil {
				return 0, err
			}
		}
		return 0, errAcksPending
	}
	return int(n), nil
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
			calls = append(calls, &scriptCall{op: "ack", shard: i, sc: scriptAck, keys: []string{sk.events, sk.att}, args: args})
		}
	}
	return calls
}

// ackDone drops the acknowledgements that went through; those that failed
// stay, their shards back off, and the first error is returned.
func (c *consumer) ackDone(ctx context.Context, calls []*scriptCall) error {
	var first error
	for i := range c.acks {
		c.acks[i] = c.acks[i][:0]
	}
	for _, a := range calls {
		if a.err == nil {
			continue
		}
		i := a.shard
		for _, id := range a.args[1:] {
			c.acks[i] = append(c.acks[i], id.(string))
		}
		if isNoGroup(a.err) {
			// The stream is gone, and the event with it: nothing to
			// acknowledge.
			c.acks[i] = c.acks[i][:0]
		}
		c.fail(ctx, i, a.err)
		if first == nil {
			first = a.err
		}
	}
	return first
}

// flushAcks sends the acknowledgements waiting, even when ctx has just
// ended.
func (c *consumer) flushAcks(ctx context.Context) {
	acks := c.ackCalls()
	if len(acks) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	c.set.runPipelined(wctx, acks)
	_ = c.ackDone(ctx, acks) // reported there
}

// bury dead-letters d if it is still this consumer's with at least need
// attempts used.
func (c *consumer) bury(ctx context.Context, shard int, id string, need int, reason string) (bool, error) {
	sk := &c.set.shards[shard]
	v, err := c.set.run(ctx, "bury", shard, scriptBury, []string{sk.events, sk.dead, sk.att},
		c.group, c.name, id, need, reason)
	n, _ := asInt64(v)
	return n == 1, err
}

// release hands the deliveries of the shards not failed back for prompt
// redelivery, even when ctx has just ended; refund names an event whose
// last attempt is given back.
func (c *consumer) release(ctx context.Context, ds []delivery, failed map[int]bool, refund string) {
	byShard := map[int][]string{}
	for _, d := range ds {
		if !failed[d.shard] {
			byShard[d.shard] = append(byShard[d.shard], d.id)
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	for i, ids := range byShard {
		_ = c.releaseShard(wctx, i, ids, refund) // ctx has ended: nothing to report to
	}
}

func (c *consumer) releaseShard(ctx context.Context, shard int, ids []string, refund string) error {
	for len(ids) > 0 {
		batch := ids[:min(len(ids), maxBatch)]
		ids = ids[len(batch):]
		args := []any{c.group, c.name, c.visMs, refund}
		for _, id := range batch {
			args = append(args, id)
		}
		if _, err := c.set.run(ctx, "release", shard, scriptRelease, c.leaseKeys(shard), args...); err != nil {
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
	c.flushAcks(ctx)
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
		h(ctx, EventInfo{Set: c.set.name, Group: c.group, Shard: shard, Attempt: attempt, Err: err, DeadLettered: buried})
	}
}
