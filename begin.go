package expset

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// callToken returns a new handler call's token.
func callToken() string { return strconv.FormatUint(rand.Uint64(), 36) }

// beginFull is the reply of begins.lua and take.lua for an event whose
// owner holds its every slot (WithOwnerConcurrency).
const beginFull = -2

// readAhead is take.lua's reply for an event read past those it began:
// the consumer begins it when it has a call slot (c.ahead).
const readAhead = -3

// parseBegin reads one reply of begins.lua: {attempt, taken now (0/1)},
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

// beginAll begins a handler call of each of todo (claimed, or set aside
// before), in one begins.lua call per shard, all in one pipeline, and
// returns the calls begun. The events not meant for the group are
// acknowledged, those that cannot be read as events buried, and those
// whose owners are at their cap set aside (refused); those another
// consumer holds are dropped.
func (c *consumer) beginAll(ctx context.Context, todo []delivery) []takenCall {
	var bs batches[int, takenCall] // the begins.lua calls, and what each begins
	for _, d := range todo {
		e, ok := c.unbegun(ctx, d)
		if !ok {
			continue
		}
		token := callToken()
		b := bs.Add(d.shard, takenCall{d: d, e: e, token: token}, func() *scriptCall {
			sc, keys := c.withSlots(d.shard, scriptBegins, scriptBeginsSlots, c.leaseKeys(d.shard)...)
			return &scriptCall{Op: "begin", Shard: d.shard, Script: sc, Keys: keys,
				Args: []any{c.group, c.name, c.leaseMs, c.cfg.maxAttempts, c.leaseMs / 6, c.cfg.ownerCap}}
		})
		b.Args = append(b.Args, d.id, token)
		if c.cfg.ownerCap > 0 {
			owner, _ := c.capped(d) // "" for a job: no slot
			b.Args = append(b.Args, owner)
		}
	}
	calls, items := bs.Calls, bs.Items
	if len(calls) == 0 {
		return nil
	}
	// Not cut short by ctx: an attempt counted is an attempt handed out.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	leased := time.Now()
	c.set.runPipelined(wctx, calls)
	var begun []takenCall
	for k, b := range calls {
		replies, ok := b.Reply.([]any)
		if b.Err == nil && (!ok || len(replies) != len(items[k])) {
			b.Err = unexpected("begins.lua", b.Reply)
		}
		if b.Err != nil {
			// Each may have counted: give that back (once, whatever ran).
			for _, it := range items[k] {
				_ = c.releaseShard(wctx, it.d.shard, []string{it.d.id}, it.d.id, it.token) // b.err is reported
			}
			c.fail(ctx, b.Shard, b.Err)
			continue
		}
		for j, it := range items[k] {
			n, taken, ok := parseBegin(replies[j])
			if !ok {
				c.fail(ctx, b.Shard, unexpected("begins.lua", b.Reply))
				continue
			}
			if n == beginFull {
				if err := c.refused(ctx, it.d); err != nil {
					c.fail(ctx, it.d.shard, err)
				}
				continue
			}
			if n <= 0 {
				continue // another consumer holds it, or a claim buries it
			}
			it.leased = leased
			if !taken {
				it.leased = it.d.at // the lease of the read or claim that took it runs on
			}
			it.e.Attempt = int(n)
			begun = append(begun, it)
		}
	}
	return begun
}

// unbegun settles d when no handler call can be made of it: an event not
// meant for the group (a dead letter of another, kicked back) is
// acknowledged, an entry that cannot be read as an event is buried. Else
// it returns the event.
func (c *consumer) unbegun(ctx context.Context, d delivery) (Expiry, bool) {
	if g, ok := d.values["g"].(string); ok && g != c.group {
		c.ackLater(d.shard, d.id, d.at)
		return Expiry{}, false
	}
	e, perr := parseExpiry(d.shard, redis.XMessage{ID: d.id, Values: d.values}, 0)
	if perr != nil {
		// Not an event at all: no handler call can mend it.
		buried, err := c.bury(ctx, d.shard, d.id, 0, perr.Error(), "")
		if buried {
			c.event(ctx, d.shard, 0, perr, true)
		}
		if err != nil {
			c.fail(ctx, d.shard, err)
		}
		return Expiry{}, false
	}
	return e, true
}

// ackLater acknowledges event id of shard, read at at and begun by no
// call, with the acknowledgements waiting: the lease keeper's, or for
// Reserve the buffer its next round sends.
func (c *consumer) ackLater(shard int, id string, at time.Time) {
	if c.pool != nil {
		c.pool.leases.ack(shard, id, "", at)
		return
	}
	c.addAck(shard, id, "", at)
}

// takenCall is an event whose handler call was begun (take.lua,
// begins.lua).
type takenCall struct {
	d      delivery
	e      Expiry
	token  string
	leased time.Time // when its lease was taken (at the latest)
}

// take reads new events of shards, at most budget in all (readCounts), and
// begins each in the same step: one take.lua call per shard, all in one
// pipeline. It returns the events begun, and those read and not begun (not
// meant for the group, or not events at all) for startCalls to settle.
// Each shard's state follows as read leaves it.
func (c *consumer) take(ctx context.Context, shards []int, budget int) ([]takenCall, []delivery) {
	if len(shards) == 0 || budget <= 0 {
		for _, i := range shards {
			c.shards[i].busy = true
		}
		return nil, nil
	}
	counts := c.readCounts(shards, budget)
	// With a cap, take.lua reads past the events of owners at it, which are
	// set aside: as many as there is room for, a script call's batch at most.
	// Without a cap, a read takes a read batch and begins what there are
	// slots for: the rest waits read ahead (c.ahead). With a cap,
	// take.lua reads past the events of owners at it, which are set
	// aside: as many as there is room for, a script call's batch at most.
	ahead := c.cfg.batch
	if c.cfg.ownerCap > 0 {
		ahead = min(maxBatch, maxParked-len(c.parked.ids))
	}
	var calls []*scriptCall
	var of []int // the shard of each call
	for k, i := range shards {
		if counts[k] == 0 {
			c.shards[i].busy = true // not read for want of budget: read it later
			continue
		}
		args := make([]any, 0, takeTokens+counts[k])
		// The first read: a read batch without a cap (what there are no
		// slots for waits read ahead); with one, what there are slots for,
		// then on past the owners at their cap.
		first, limit := max(counts[k], c.cfg.batch), max(counts[k], ahead)
		if c.cfg.ownerCap > 0 {
			first = counts[k]
		}
		args = append(args, c.group, c.name, counts[k], c.cfg.ownerCap, limit, c.leaseMs, first)
		for j := 0; j < counts[k]; j++ {
			args = append(args, callToken())
		}
		sc, keys := c.withSlots(i, scriptTake, scriptTakeSlots, append(c.leaseKeys(i), c.set.shards[i].Take)...)
		calls = append(calls, &scriptCall{Op: "take", Shard: i, Script: sc, Keys: keys, Args: args})
		of = append(of, i)
	}
	// Not cut short by ctx: an attempt counted is an attempt handed out.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	at := time.Now()
	c.set.runPipelined(wctx, calls)
	var taken []takenCall
	var rest, over []delivery
	for k, call := range calls {
		t, r, o := c.tookFrom(ctx, of[k], call, at)
		taken, rest, over = append(taken, t...), append(rest, r...), append(over, o...)
	}
	if len(over) > 0 {
		c.release(ctx, over, nil)
	}
	return taken, rest
}

// tookFrom reads the reply of call, take.lua's on shard i sent at at, and
// updates the shard's state: it returns the events begun, those read and
// not begun (for beginAll to settle), and those whose owners are at their
// cap that could not be set aside (to release).
func (c *consumer) tookFrom(ctx context.Context, i int, call *scriptCall, at time.Time) (taken []takenCall, rest, over []delivery) {
	sh := &c.shards[i]
	entries, ok := call.Reply.([]any)
	if call.Err == nil && !ok {
		call.Err = unexpected("take.lua", call.Reply)
	}
	if call.Err != nil {
		// Begun or not, the entries (if read) stay pending, uncounted
		// or counted: a claim takes them after the lease TTL.
		c.fail(ctx, i, fmt.Errorf("expset: read %s: %w", c.set.shards[i].Events, call.Err))
		return nil, nil, nil
	}
	sh.bo.ok()
	sh.busy = len(entries) > 0
	begun := 0
	for _, v := range entries {
		id, values, n, ok := parseTaken(v)
		if ok && n > 0 && takeTokens+begun >= len(call.Args) {
			ok = false
		}
		if !ok {
			c.fail(ctx, i, unexpected("take.lua", call.Reply))
			break
		}
		d := delivery{shard: i, id: id, values: values, at: at}
		if n == readAhead {
			c.ahead = append(c.ahead, d)
			continue
		}
		if n == beginFull {
			// Its owner is at its cap: set aside, or released when too
			// many are.
			owner, _ := c.capped(d)
			if !c.park(d, owner, false) {
				over = append(over, d)
			}
			continue
		}
		if n <= 0 {
			rest = append(rest, d)
			continue
		}
		// The k-th call begun has the k-th token.
		token := call.Args[takeTokens+begun].(string)
		begun++
		e, perr := parseExpiry(i, redis.XMessage{ID: id, Values: values}, 0)
		if perr != nil {
			rest = append(rest, d) // buried by beginAll
			continue
		}
		e.Attempt = int(n)
		taken = append(taken, takenCall{d: d, e: e, token: token, leased: at})
	}
	return taken, rest, over
}

// takeTokens is the index of take.lua's first token argument.
const takeTokens = 7

// parseTaken reads one {id, {field, value, ...}, attempt} of take.lua.
func parseTaken(v any) (id string, values map[string]any, n int64, ok bool) {
	e, ok := v.([]any)
	if !ok || len(e) != 3 {
		return "", nil, 0, false
	}
	id, ok1 := asString(e[0])
	fs, ok2 := e[1].([]any)
	n, ok3 := asInt64(e[2])
	values, ok4 := fieldMap(fs)
	return id, values, n, ok1 && ok2 && ok3 && ok4
}
