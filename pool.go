package expset

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxConcurrency is the most handler calls one Consume runs at once.
const maxConcurrency = 1000

// gatherWait is how long, at most, a pool's reader waits with fewer than
// half its call slots free and calls under way before it reads anyway: a
// call that returns at once frees its slot within microseconds, and a read
// for many slots costs the same round trips as a read for one.
const gatherWait = time.Millisecond

// WithConcurrency sets how many handler calls one Consume runs at once
// (default 1: one at a time, on Consume's goroutine unless
// WithOwnerConcurrency is given; 1 to 1000, so 0 and
// negative numbers are errors). With n over 1, one reader feeds up to n
// calls, each on a goroutine of its own, so handle must be safe for
// simultaneous use. Each call is an attempt under a lease of its own,
// exactly as without the option: the same attempt count, renewals, handler
// context and settling. A slow call holds up none of the others.
//
// The reader takes from the streams only as many events as there are free
// call slots (claims included), so no event read waits behind a running
// call; what cannot be started when Consume stops is released, uncharged.
// While fewer than half the slots are free and calls run, the reader waits
// up to 1ms for more to free before it reads. Round trips are shared: a
// shard's new events are read and their calls begun in one script call,
// all shards' in one pipeline (claimed events are begun likewise); the
// lease renewals of the running calls and the
// acknowledgements (one script per shard, as without the option) go in
// shared pipelines, a renewal due within half a beat of another with it.
//
// One Consume per process, WithConcurrency(n), is the way to run a worker
// pool: it reads each shard once and holds one set of wake-up
// subscriptions, where n Consume calls would each read and subscribe.
func WithConcurrency(n int) ConsumeOption {
	return consumeOption(func(c *consumeConfig) error {
		c.concurrency = n
		return inRange("WithConcurrency", n, 1, maxConcurrency)
	})
}

// pool is what a Consume WithConcurrency over 1 keeps of its handler calls.
// running and nextRead are Consume's goroutine's; the calls send their
// outcome on done and signal the loop.
type pool struct {
	n        int
	running  int           // calls started and not yet reaped
	lowSince time.Time     // since when fewer than half the slots have been free (zero: not so)
	done     chan callDone // the outcome of each finished call (buffer n: never blocks)
	calls    sync.WaitGroup
	leases   *leaseKeeper
}

// callDone is the outcome of one handler call of a pool: nil, or a Redis
// error settling a failed call, confined to shard.
type callDone struct {
	shard int
	err   error
}

func newPool(c *consumer) *pool {
	return &pool{n: c.cfg.concurrency, done: make(chan callDone, c.cfg.concurrency), leases: newLeaseKeeper(c)}
}

// poolRound is round for a Consume WithConcurrency over 1: it reaps the
// calls that finished and then, when call slots are free, surveys the
// shards, reads and begins at most as many events as there are free slots
// (take; claimed events through startCalls) and starts a call for each.
// Finished calls wake
// the loop (c.wk.signal). Acknowledgements and lease renewals are the lease
// keeper's.
func (c *consumer) poolRound(ctx context.Context) time.Duration {
	p := c.pool
	c.reap(ctx)
	if c.wk != nil && c.wk.freed.Swap(false) {
		c.slotFreed() // a slot of the set was freed, by any consumer
	}
	now := time.Now()
	if p.leases.acksFailing() {
		// No new call while an acknowledgement fails (reported), lest a
		// handled event's lease run out in the buffer.
		return c.beat
	}
	free := p.n - p.running
	if free > 0 && free < (p.n+1)/2 && p.running > 0 {
		// Few slots free and calls under way: wait a moment for more to
		// free, so that a read and its begins carry many events.
		if p.lowSince.IsZero() {
			p.lowSince = now
		}
		if left := gatherWait - now.Sub(p.lowSince); left > 0 {
			return left
		}
	}
	p.lowSince = time.Time{}
	var todo []delivery
	tried := 0
	came := false // take started calls
	if free > 0 {
		todo = c.unpark(now, free)
		tried = len(todo)
		var claimed []delivery
		var read, visit []int
		claimed, read, visit = c.survey(ctx, now, free-tried)
		todo = append(todo, claimed...)
		if c.cfg.ownerCap > 0 {
			todo = c.unique(todo)
		}
		if len(visit) > 0 {
			c.read(ctx, nil, visit, 0) // the safety poll's pending counts; the shards stay busy
		}
		var taken []takenCall
		var rest []delivery
		taken, rest = c.take(ctx, append(read, visit...), free-len(todo))
		todo = append(todo, rest...)
		if ctx.Err() != nil {
			c.giveBack(ctx, taken)
			taken = nil
		}
		for _, tc := range taken {
			c.startCall(ctx, tc.d, tc.e, tc.token, tc.d.at)
		}
		came = len(taken) > 0
	}
	if ctx.Err() != nil {
		c.release(ctx, todo, nil)
		return 0
	}
	c.startCalls(ctx, todo)
	if p.running < p.n && (len(todo) > tried || came || c.anyBusy()) {
		return 0
	}
	if p.running == 0 {
		// Idle: what was handled is acknowledged now.
		p.leases.flush()
	}
	return c.idleWait(now)
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

// startCalls begins a handler call of each of todo (but those not meant
// for the group and those that cannot be read as events, settled here as
// deliver does), in one begins.lua call per shard, all in one pipeline, and
// starts each call on a goroutine of its own.
func (c *consumer) startCalls(ctx context.Context, todo []delivery) {
	type begun struct {
		d     delivery
		e     Expiry
		token string
	}
	var calls []*scriptCall
	var items [][]begun      // per call, what it begins
	byShard := map[int]int{} // shard -> its call in calls, while it has room
	for _, d := range todo {
		if g, ok := d.values["g"].(string); ok && g != c.group {
			c.pool.leases.ack(d.shard, d.id, d.at) // not for this group
			continue
		}
		e, perr := parseExpiry(d.shard, redis.XMessage{ID: d.id, Values: d.values}, 0)
		if perr != nil {
			buried, err := c.bury(ctx, d.shard, d.id, 0, perr.Error())
			if buried {
				c.event(ctx, d.shard, 0, perr, true)
			}
			if err != nil {
				c.fail(ctx, d.shard, err)
			}
			continue
		}
		k, ok := byShard[d.shard]
		if !ok || len(items[k]) >= maxBatch {
			k = len(calls)
			byShard[d.shard] = k
			sc, keys := c.withSlots(d.shard, scriptBegins, scriptBeginsSlots, c.leaseKeys(d.shard)...)
			calls = append(calls, &scriptCall{op: "begin", shard: d.shard, sc: sc, keys: keys,
				args: []any{c.group, c.name, c.visMs, c.cfg.maxAttempts, c.visMs / 6, c.cfg.ownerCap}})
			items = append(items, nil)
		}
		token := callToken()
		calls[k].args = append(calls[k].args, d.id, token)
		if c.cfg.ownerCap > 0 {
			owner, _ := c.capped(d) // "" for a job: no slot
			calls[k].args = append(calls[k].args, owner)
		}
		items[k] = append(items[k], begun{d, e, token})
	}
	if len(calls) == 0 {
		return
	}
	// Not cut short by ctx: an attempt counted is an attempt handed out.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	leased := time.Now()
	c.set.runPipelined(wctx, calls)
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
			l := leased
			if !taken {
				l = it.d.at // the lease of the read or claim that took it runs on
			}
			it.e.Attempt = int(n)
			c.startCall(ctx, it.d, it.e, it.token, l)
		}
	}
}

// startCall starts the handler call of e (from d, begun with token) on a
// goroutine of its own, under a lease taken at leased.
func (c *consumer) startCall(ctx context.Context, d delivery, e Expiry, token string, leased time.Time) {
	c.pool.running++
	c.pool.calls.Add(1)
	go c.poolCall(ctx, d, e, token, leased)
}

// takenCall is an event take.lua read and began.
type takenCall struct {
	d     delivery
	e     Expiry
	token string
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
	ahead := 0
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
		args = append(args, c.group, c.name, counts[k], c.cfg.ownerCap, max(counts[k], ahead), c.visMs)
		for j := 0; j < counts[k]; j++ {
			args = append(args, callToken())
		}
		sc, keys := c.withSlots(i, scriptTake, scriptTakeSlots, c.leaseKeys(i)...)
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
		i := of[k]
		sh := &c.shards[i]
		entries, ok := call.v.([]any)
		if call.err == nil && !ok {
			call.err = unexpected("take.lua", call.v)
		}
		if call.err != nil {
			// Begun or not, the entries (if read) stay pending, uncounted
			// or counted: a claim takes them after the lease TTL.
			c.fail(ctx, i, fmt.Errorf("expset: read %s: %w", c.set.shards[i].events, call.err))
			continue
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
			if n == beginFull {
				// Its owner is at its cap: set aside, or released when
				// too many are.
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
				rest = append(rest, d) // buried by startCalls
				continue
			}
			e.Attempt = int(n)
			taken = append(taken, takenCall{d: d, e: e, token: token})
		}
	}
	if len(over) > 0 {
		c.release(ctx, over, nil)
	}
	return taken, rest
}

// takeTokens is the index of take.lua's first token argument.
const takeTokens = 6

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

// giveBack releases events take.lua began and no call was started for
// (Consume is stopping), giving their attempts back.
func (c *consumer) giveBack(ctx context.Context, taken []takenCall) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	for _, tc := range taken {
		_ = c.releaseShard(wctx, tc.d.shard, []string{tc.d.id}, tc.d.id, tc.token) // ctx has ended: nothing to report to
	}
}

// poolCall makes the handler call of e (from d, whose call token is token)
// under a lease taken at leased, settles a failure, and hands the outcome
// to Consume's goroutine.
func (c *consumer) poolCall(ctx context.Context, d delivery, e Expiry, token string, leased time.Time) {
	defer c.pool.calls.Done()
	out := callDone{shard: d.shard}
	leased, herr := c.pool.leases.call(ctx, d.shard, d.id, e, leased)
	if herr == nil {
		c.pool.leases.handled(ctx, d.shard, d.id, e.Attempt, leased)
	} else {
		out.err = c.failed(ctx, d, e.Attempt, token, herr)
	}
	c.pool.done <- out
	if c.wk != nil {
		select {
		case c.wk.signal <- struct{}{}:
		default:
		}
	}
}

// reap frees the slots of the calls that have finished; a Redis error
// settling one makes its shard back off.
func (c *consumer) reap(ctx context.Context) {
	p := c.pool
	for {
		select {
		case r := <-p.done:
			p.running--
			c.slotFreed()
			if r.err != nil {
				c.fail(ctx, r.shard, r.err)
			}
		default:
			return
		}
	}
}

// drain waits for the calls under way as Consume stops (their handlers'
// context has ended; each returns when its handler does), settles them and
// stops the lease renewals.
func (c *consumer) drain(ctx context.Context) {
	c.pool.calls.Wait()
	c.reap(ctx)
	c.pool.leases.close()
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

// leaseKeeper is the lease side of a pool: it renews the leases of the
// running handler calls and sends the acknowledgements of the handled
// events, on a goroutine of its own, so that neither waits for the reader.
// Each of its sends is one pipeline: a renewal (begin.lua mode t) of every
// call due within half a beat, and the acknowledgements waiting when they
// are due (ack.lua, one per shard), so n calls cost about one round trip a
// beat instead of n. While a pool runs, the consumer's acknowledgement
// buffer (c.acks, c.ackDue) is the keeper's, under mu.
type leaseKeeper struct {
	c       *consumer
	ctx     context.Context // Consume's: errors are reported with it
	mu      sync.Mutex
	calls   map[*leaseCall]struct{}
	failing bool          // the last acknowledgements sent failed
	kick    chan struct{} // a call joined or an acknowledgement came (buffer 1)
	sending sync.Mutex    // held while a send is out
	stop    chan struct{}
	done    chan struct{}
}

// leaseCall is one running handler call's lease.
type leaseCall struct {
	shard  int
	id     string
	leased time.Time // when the last renewal that succeeded was sent (or the lease taken)
	next   time.Time // when the next renewal is due
	lost   context.CancelCauseFunc
}

func newLeaseKeeper(c *consumer) *leaseKeeper {
	return &leaseKeeper{c: c, calls: map[*leaseCall]struct{}{}, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
}

// start starts the keeper's goroutine; close stops it (what is still
// waiting to be acknowledged stays in the buffer, for Consume's stop).
func (k *leaseKeeper) start(ctx context.Context) {
	k.ctx = ctx
	go k.run()
}

func (k *leaseKeeper) close() {
	close(k.stop)
	<-k.done
}

func (k *leaseKeeper) wake() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

func (k *leaseKeeper) run() {
	defer close(k.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		wait := time.Hour
		for lc := range k.calls {
			wait = min(wait, time.Until(lc.next))
		}
		if due := k.c.ackDue; !due.IsZero() {
			wait = min(wait, time.Until(due))
		}
		k.mu.Unlock()
		timer.Reset(max(wait, 0))
		select {
		case <-k.stop:
			return
		case <-k.kick:
			continue // Reset above drops a timer that fired meanwhile (Go 1.23 timers)
		case <-timer.C:
		}
		k.send(false)
	}
}

// flush sends every acknowledgement waiting now, with the renewals due.
func (k *leaseKeeper) flush() { k.send(true) }

// acksFailing reports whether the last acknowledgements sent failed.
func (k *leaseKeeper) acksFailing() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.failing
}

// ack adds id, of shard, whose lease started at leased, to the
// acknowledgements waiting (as bufferAck does).
func (k *leaseKeeper) ack(shard int, id string, leased time.Time) {
	k.mu.Lock()
	full := k.c.addAck(shard, id, leased)
	k.mu.Unlock()
	if full {
		k.flush()
	} else {
		k.wake()
	}
}

// handled settles a handler call of attempt that returned nil, as
// consumer.handled does.
func (k *leaseKeeper) handled(ctx context.Context, shard int, id string, attempt int, leased time.Time) {
	k.c.event(ctx, shard, attempt, nil, false)
	k.ack(shard, id, leased)
	if attempt >= k.c.cfg.maxAttempts || k.c.cfg.ownerCap > 0 {
		// The last attempt: acknowledged now (see consumer.handled).
		k.flush()
	}
}

// send sends, in one pipeline, a renewal of every lease due within half a
// beat and the acknowledgements waiting, when they are due or all is set.
// A renewal that finds the event held by another consumer or acknowledged
// ends the call's context with ErrLeaseLost (renewals go on until the
// handler returns, as without a pool); one that fails for a Redis error is
// reported and tried again a beat later. Acknowledgements that fail are
// reported and kept, and tried again a beat later; meanwhile acksFailing
// holds the reader back.
func (k *leaseKeeper) send(all bool) {
	c := k.c
	k.sending.Lock()
	defer k.sending.Unlock()
	now := time.Now()
	var due []*leaseCall
	var calls []*scriptCall
	k.mu.Lock()
	for lc := range k.calls {
		if lc.next.Sub(now) <= c.beat/2 {
			due = append(due, lc)
			sc, keys := c.withSlots(lc.shard, scriptBegin, scriptBeginSlots, c.leaseKeys(lc.shard)...)
			calls = append(calls, &scriptCall{op: "renew", shard: lc.shard, sc: sc,
				keys: keys, args: []any{c.group, c.name, lc.id, "t", c.visMs}})
		}
	}
	var acks []*scriptCall
	if all || c.acksDue(now) {
		acks = c.ackCalls()
		c.clearAcks()
	}
	k.mu.Unlock()
	if len(calls)+len(acks) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), max(c.beat, time.Second))
	c.set.runPipelined(sctx, append(calls, acks...))
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	for j, lc := range due {
		r := calls[j]
		switch n, _ := asInt64(r.v); {
		case r.err != nil:
			c.set.reportError(k.ctx, "consume", lc.shard, r.err, c.beat)
			lc.next = now.Add(c.beat)
		case n != 1:
			lc.lost(ErrLeaseLost)
			lc.next = now.Add(c.beat)
		default:
			lc.leased, lc.next = now, now.Add(c.beat)
		}
	}
	if len(acks) == 0 {
		return
	}
	failed := c.requeueAcks(acks)
	k.failing = false
	for _, a := range failed {
		c.set.reportError(k.ctx, "consume", a.shard, a.err, c.beat)
		if !isNoGroup(a.err) {
			k.failing = true
		}
	}
	if k.failing {
		c.ackDue = now.Add(c.beat)
	}
}

// call makes one handler call of e, whose lease was taken at leased, as
// consumer.call does, its renewals sent by the keeper. It returns when the
// last renewal that succeeded was sent, and the handler's error.
func (k *leaseKeeper) call(ctx context.Context, shard int, id string, e Expiry, leased time.Time) (time.Time, error) {
	c := k.c
	hctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	hctx, cancel := context.WithTimeout(hctx, c.cfg.maxHandling)
	defer cancel()
	lc := &leaseCall{shard: shard, id: id, leased: leased, next: leased.Add(c.beat), lost: lost}
	k.mu.Lock()
	k.calls[lc] = struct{}{}
	k.mu.Unlock()
	k.wake()

	err := c.handle(hctx, e)

	// A send under way may hold this call: wait for it (sending), so that
	// no renewal lands after the call is settled.
	k.sending.Lock()
	defer k.sending.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.calls, lc)
	return lc.leased, err
}
