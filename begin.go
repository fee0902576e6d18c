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

// parseBegin reads one reply of begins.lua: {attempt, taken now (0/1),
// the owner's slots all held (0/1)}, or 0, -1 or -2.
func parseBegin(v any) (n int64, taken, full, ok bool) {
	if xs, isList := v.([]any); isList {
		if len(xs) != 3 {
			return 0, false, false, false
		}
		n, ok1 := asInt64(xs[0])
		t, ok2 := asInt64(xs[1])
		f, ok3 := asInt64(xs[2])
		return n, t == 1, f == 1, ok1 && ok2 && ok3 && n > 0
	}
	n, ok = asInt64(v)
	return n, false, false, ok && n <= 0
}

// beginAll begins a handler call of each of todo (claimed, or set aside
// before), in one begins.lua call per shard, all in one pipeline, and
// returns the calls begun. The events not meant for the group are
// acknowledged, those that cannot be read as events buried, and those
// whose owners are at their cap set aside (refused); those another
// consumer holds are dropped.
func (c *consumer) beginAll(ctx context.Context, todo []delivery) []takenCall {
	var bs batches[int, takenCall] // the begins.lua calls, and what each begins
	// The fresh first (each call counts them: ARGV[7]), begun without a
	// look at the pending list: read or claimed by this consumer so lately
	// that no other can have taken them (see freshFor).
	now := time.Now()
	for _, fresh := range []bool{true, false} {
		for _, d := range todo {
			if c.fresh(d, now) != fresh {
				continue
			}
			e, ok := c.unbegun(ctx, d)
			if !ok {
				continue
			}
			token := callToken()
			b := bs.Add(d.shard, takenCall{d: d, e: e, token: token}, func() *scriptCall {
				sc, keys := c.withSlots(d.shard, scriptBegins, scriptBeginsSlots, c.leaseKeys(d.shard)...)
				return &scriptCall{Op: "begin", Shard: d.shard, Script: sc, Keys: keys,
					Args: []any{c.group, c.name, c.leaseMs, c.cfg.maxAttempts, c.leaseMs / 6, c.cfg.ownerCap, 0}}
			})
			if fresh {
				b.Args[beginFresh] = b.Args[beginFresh].(int) + 1
			}
			b.Args = append(b.Args, d.id, token)
			if c.cfg.ownerCap > 0 {
				owner, _ := c.capped(d) // "" for a job: no slot
				b.Args = append(b.Args, owner)
			}
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
				_ = c.releaseShard(wctx, it.d.shard, []string{it.d.id}, it.d.id, it.token) // b.Err is reported
			}
			c.fail(ctx, b.Shard, b.Err)
			continue
		}
		for j, it := range items[k] {
			n, taken, full, ok := parseBegin(replies[j])
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
			it.leased, it.full = leased, full
			if !taken {
				it.leased = it.d.at // the lease of the read or claim that took it runs on
			}
			it.e.Attempt = int(n)
			begun = append(begun, it)
		}
	}
	return begun
}

// beginFresh is the index of begins.lua's count of fresh items (ARGV[7]).
const beginFresh = 6

// fresh reports whether begins.lua may begin d at now without a look at
// the pending list or the attempts field: d is a new event this consumer
// read less than half the time (a sixth of the lease TTL) under which the
// script keeps a consumer's own lease as it is, so no other consumer can
// have taken it (a claim needs it idle a whole lease TTL) and no call of
// it has begun, with room for the clocks of client and server to differ
// in rate. A job's event is never fresh: Set.Cancel acknowledges and
// deletes one read and not begun, and its begin must see that.
func (c *consumer) fresh(d delivery, now time.Time) bool {
	o, _ := d.values["o"].(string)
	return d.new && now.Sub(d.at) < c.cfg.leaseTTL/12 && !isJobOwner(o)
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

// takenCall is an event whose handler call was begun (begins.lua,
// take.lua).
type takenCall struct {
	d      delivery
	e      Expiry
	token  string
	leased time.Time // when its lease was taken (at the latest)
	full   bool      // its owner's slots were all held with its own (WithOwnerConcurrency)
}

// take reads new events of shards, at most budget in all (readCounts), and
// begins each in the same step, for a Consume WithOwnerConcurrency: one
// take.lua call per shard, all in one pipeline. The script reads past the
// events of owners at their cap, which are set aside (as many as there is
// room for, a script call's batch at most), yet reads no event it could
// begin and has no call slot for. It returns the events begun, and those
// read and not begun (not meant for the group, or not events at all) for
// beginAll to settle. Each shard's state follows as read leaves it.
func (c *consumer) take(ctx context.Context, shards []int, budget int) ([]takenCall, []delivery) {
	if len(shards) == 0 || budget <= 0 {
		for _, i := range shards {
			c.shards[i].busy = true
		}
		return nil, nil
	}
	counts := c.readCounts(shards, budget)
	ahead := min(maxBatch, maxParked-len(c.parked.ids))
	var calls []*scriptCall
	var of []int // the shard of each call
	for k, i := range shards {
		if counts[k] == 0 {
			c.shards[i].busy = true // not read for want of budget: read it later
			continue
		}
		args := make([]any, 0, takeTokens+counts[k])
		// The first read: what there are slots for, then on past the
		// owners at their cap.
		first, limit := counts[k], max(counts[k], ahead)
		args = append(args, c.group, c.name, counts[k], c.cfg.ownerCap, limit, c.leaseMs, first)
		for j := 0; j < counts[k]; j++ {
			args = append(args, callToken())
		}
		sk := &c.set.shards[i]
		keys := append(c.leaseKeys(i), sk.Take, sk.Run, sk.Runo)
		calls = append(calls, &scriptCall{Op: "take", Shard: i, Script: scriptTakeSlots, Keys: keys, Args: args})
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
		id, values, n, full, ok := parseTaken(v)
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
		taken = append(taken, takenCall{d: d, e: e, token: token, leased: at, full: full})
	}
	return taken, rest, over
}

// takeTokens is the index of take.lua's first token argument.
const takeTokens = 7

// parseTaken reads one {id, {field, value, ...}, attempt, full} of
// take.lua.
func parseTaken(v any) (id string, values map[string]any, n int64, full, ok bool) {
	e, ok := v.([]any)
	if !ok || len(e) != 4 {
		return "", nil, 0, false, false
	}
	id, ok1 := asString(e[0])
	fs, ok2 := e[1].([]any)
	n, ok3 := asInt64(e[2])
	f, ok5 := asInt64(e[3])
	values, ok4 := fieldMap(fs)
	return id, values, n, f == 1, ok1 && ok2 && ok3 && ok4 && ok5
}
