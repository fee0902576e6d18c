package expset

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	reason := fmt.Sprintf("the last handler call did not finish: its consumer stopped renewing the lease for %v (it died, or lost Redis)", c.cfg.leaseTTL)
	at := time.Now()
	v, err := c.set.run(ctx, "claim", i, scriptClaim, []string{sk.events, sk.dead, sk.att},
		c.group, c.name, c.leaseMs, sh.cursor, readCount(c.cfg.batch, budget), c.cfg.maxAttempts, reason)
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

// anyBusy reports whether a shard not backing off may have events unread.
func (c *consumer) anyBusy() bool {
	now := time.Now()
	for i := range c.shards {
		if sh := &c.shards[i]; sh.busy && !now.Before(sh.retryAt) {
			return true
		}
	}
	return false
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
		b := bs.add(d.shard, takenCall{d: d, e: e, token: token}, func() *scriptCall {
			sc, keys := c.withSlots(d.shard, scriptBegins, scriptBeginsSlots, c.leaseKeys(d.shard)...)
			return &scriptCall{op: "begin", shard: d.shard, sc: sc, keys: keys,
				args: []any{c.group, c.name, c.leaseMs, c.cfg.maxAttempts, c.leaseMs / 6, c.cfg.ownerCap}}
		})
		b.args = append(b.args, d.id, token)
		if c.cfg.ownerCap > 0 {
			owner, _ := c.capped(d) // "" for a job: no slot
			b.args = append(b.args, owner)
		}
	}
	calls, items := bs.calls, bs.items
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
		replies, ok := b.v.([]any)
		if b.err == nil && (!ok || len(replies) != len(items[k])) {
			b.err = unexpected("begins.lua", b.v)
		}
		if b.err != nil {
			// Each may have counted: give that back (once, whatever ran).
			for _, it := range items[k] {
				_ = c.releaseShard(wctx, it.d.shard, []string{it.d.id}, it.d.id, it.token) // b.err is reported
			}
			c.fail(ctx, b.shard, b.err)
			continue
		}
		for j, it := range items[k] {
			n, taken, ok := parseBegin(replies[j])
			if !ok {
				c.fail(ctx, b.shard, unexpected("begins.lua", b.v))
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
		sc, keys := c.withSlots(i, scriptTake, scriptTakeSlots, append(c.leaseKeys(i), c.set.shards[i].take)...)
		calls = append(calls, &scriptCall{op: "take", shard: i, sc: sc, keys: keys, args: args})
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
	entries, ok := call.v.([]any)
	if call.err == nil && !ok {
		call.err = unexpected("take.lua", call.v)
	}
	if call.err != nil {
		// Begun or not, the entries (if read) stay pending, uncounted
		// or counted: a claim takes them after the lease TTL.
		c.fail(ctx, i, fmt.Errorf("expset: read %s: %w", c.set.shards[i].events, call.err))
		return nil, nil, nil
	}
	sh.bo.ok()
	sh.busy = len(entries) > 0
	begun := 0
	for _, v := range entries {
		id, values, n, ok := parseTaken(v)
		if ok && n > 0 && takeTokens+begun >= len(call.args) {
			ok = false
		}
		if !ok {
			c.fail(ctx, i, unexpected("take.lua", call.v))
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
		token := call.args[takeTokens+begun].(string)
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

// readCounts returns how many events to read from each of shards: a read
// batch each, or with budget >= 0 at most budget in all, a read batch per
// shard starting from c.nextRead, so that every shard gets its turn.
func (c *consumer) readCounts(shards []int, budget int) []int {
	counts := make([]int, len(shards))
	if budget < 0 {
		for k := range counts {
			counts[k] = c.cfg.batch
		}
		return counts
	}
	n := len(c.shards)
	for step := 0; step < n && budget > 0; step++ {
		i := (c.nextRead + step) % n
		for k, s := range shards {
			if s == i && counts[k] == 0 {
				counts[k] = readCount(c.cfg.batch, budget)
				budget -= counts[k]
				c.nextRead = (i + 1) % n
				break
			}
		}
	}
	return counts
}

// readCount is a read batch, or budget when that is less (budget < 0: no
// bound).
func readCount(batch, budget int) int {
	if budget < 0 {
		return batch
	}
	return min(batch, budget)
}
