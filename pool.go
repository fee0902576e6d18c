package expset

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// maxConcurrency is the most handler calls one Consume runs at once.
const maxConcurrency = 1000

// gatherWait is how long, at most, a pool's reader waits with fewer than
// half its call slots free and calls under way before it reads anyway: a
// call that returns at once frees its slot within microseconds, and a read
// for many slots costs the same round trips as a read for one.
const gatherWait = time.Millisecond

// WithConcurrency sets how many handler calls one Consume runs at once
// (default 1; 1 to 1000, so 0 and negative numbers are errors). One reader
// feeds up to n calls, each on a goroutine of its own, so with n over 1
// handle must be safe for simultaneous use. Each call is an attempt under
// a lease of its own. A slow call holds up none of the others.
//
// The reader begins as many calls as there are free call slots (claims
// included); the events a read takes past those (WithReadBatch) wait read
// ahead, uncharged, and what cannot be started when Consume stops is
// released, uncharged.
// While fewer than half the slots are free and calls run, the reader waits
// up to 1ms for more to free before it reads. Round trips are shared: the
// shards' new events are read in one pipeline (plain XREADGROUPs, which
// charge nothing) and their calls begun in the next, one script call per
// shard, claimed events with them; the
// lease renewals of the running calls and the
// acknowledgements (one script per shard) go in shared pipelines, a
// renewal due within half a beat of another with it.
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

// pool is what a Consume keeps of its handler calls.
// running and nextRead are Consume's goroutine's; the calls send their
// outcome on done and signal the loop.
type pool struct {
	n        int
	running  int           // calls started and not yet reaped
	lowSince time.Time     // since when fewer than half the slots have been free (zero: not so)
	done     chan callDone // the outcome of each finished call (buffer n: never blocks)
	calls    sync.WaitGroup
	leases   *leaseKeeper
	// abandoned is set when Consume stops waiting for its calls
	// (WithShutdownTimeout): those still running settle nothing.
	abandoned atomic.Bool
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

// poolRound is one round of Consume: it reaps the calls that finished and
// then, when call slots are free, surveys the shards, reads and begins at
// most as many events as there are free slots (take; claimed events and
// those set aside through beginAll) and starts a call for each. It returns
// how long to wait before the next round, unless a wake-up comes first.
// Finished calls wake the loop (c.wk.poke). Acknowledgements and lease
// renewals are the lease keeper's.
func (c *consumer) poolRound(ctx context.Context) time.Duration {
	p := c.pool
	c.reap(ctx)
	if c.wk != nil && c.wk.freed.Swap(false) {
		c.slotFreed() // a slot of the set was freed, by any consumer
	}
	now := time.Now()
	if p.leases.acksFailing() {
		// No new call while an acknowledgement fails (reported), lest a
		// handled event's lease run out in the buffer; the keeper wakes
		// the loop once they go through.
		return min(c.beat, time.Second)
	}
	free := p.n - p.running
	if c.groupFull(now) || c.pausedLately(now) {
		free = 0 // no call can begin before a slot of the group frees, or the group is resumed
	}
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
	more := false // parked every event of a read: read on at once
	if free > 0 && !c.paused.IsZero() {
		// The group was paused a while ago: try the events set aside,
		// and read nothing new until one begins or a resume wakes it.
		c.parked.at = time.Time{}
		todo = c.unpark(now, free)
		tried = len(todo)
	} else if free > 0 {
		todo = c.unpark(now, free)
		todo = append(todo, c.behindParked(ctx, c.takeAhead(free-len(todo)))...)
		tried = len(todo)
		var claimed []delivery
		var read, visit []int
		claimed, read, visit = c.survey(ctx, now, free-tried)
		todo = c.unique(append(todo, claimed...), tried)
		// The safety poll: a plain read and the pending count (a
		// shard with nothing new costs no script call).
		todo = append(todo, c.read(ctx, nil, visit, max(free-len(todo), 0))...)
		var got []delivery
		got, more = c.readNew(ctx, read, free-len(todo))
		todo = append(todo, got...)
	}
	if ctx.Err() != nil {
		c.release(ctx, todo, nil)
		return 0
	}
	for _, tc := range c.beginAll(ctx, c.grant(ctx, todo)) {
		c.startCall(ctx, tc)
	}
	if p.running < p.n && !c.groupFull(now) && c.paused.IsZero() && (len(todo) > tried || more || c.anyBusy() || len(c.ahead) > 0) {
		return 0
	}
	if p.running == 0 {
		// Idle: what was handled is acknowledged now.
		p.leases.flush()
	}
	return c.idleWait(now)
}

// readNew reads new events of the shards read for a round with left free
// call slots (none: they stay busy), and returns those to begin with
// beginAll, and whether there may be more to read at once.
//
// A plain read takes a batch (WithReadBatch): the calls there are slots
// for are begun with the rest (beginAll), what is read past them waits
// read ahead, uncharged. With a cap, the events of owners with events set
// aside join those (behindParked), and while every event a read takes is
// of such an owner the next read takes twice as many, up to maxBatch a
// shard, to reach the events of owners with room.
func (c *consumer) readNew(ctx context.Context, read []int, left int) (todo []delivery, more bool) {
	if left <= 0 {
		for _, i := range read {
			c.shards[i].busy = true // read at a later round
		}
		return nil, false
	}
	got := c.read(ctx, read, nil, max(left, c.cfg.batch, c.passing))
	n := len(got)
	got = c.behindParked(ctx, got)
	c.passing = 0
	if n > 0 && len(got) == 0 {
		c.passing = min(2*max(n, c.cfg.batch), maxBatch)
	}
	todo = got[:min(left, len(got))]
	c.ahead = append(c.ahead, got[min(left, len(got)):]...)
	return todo, n > len(got)
}

// startCall starts the handler call of tc on a goroutine of its own.
func (c *consumer) startCall(ctx context.Context, tc takenCall) {
	c.pool.running++
	c.pool.calls.Add(1)
	go c.poolCall(ctx, tc)
}

// poolCall makes the handler call of tc, settles it, and hands the outcome
// to Consume's goroutine. A call that outlives its Consume's shutdown
// timeout settles nothing: its lease lapses and the event comes back.
func (c *consumer) poolCall(ctx context.Context, tc takenCall) {
	defer c.pool.calls.Done()
	d, e, token := tc.d, tc.e, tc.token
	out := callDone{shard: d.shard}
	leased, gone, herr := c.pool.leases.call(ctx, d.shard, d.id, token, tc.slot, e, tc.leased)
	if tc.slot {
		c.pool.leases.freeSlots(token) // the handler has returned
	}
	switch {
	case gone || c.pool.abandoned.Load():
		// Another call of the event has begun, or Consume has returned:
		// this call's outcome changes nothing.
	case herr == nil:
		c.pool.leases.handled(ctx, d.shard, d.id, token, e.Attempt, leased, tc.full)
	default:
		if err := c.failed(ctx, d, e.Attempt, token, herr); !errors.Is(err, ErrLeaseLost) {
			out.err = err
		}
	}
	c.pool.done <- out
	c.wk.poke()
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
// context has ended; each returns when its handler does), at most
// WithShutdownTimeout, settles them and stops the lease renewals. Calls
// still running then are abandoned: they settle nothing.
func (c *consumer) drain(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		c.pool.calls.Wait()
		close(done)
	}()
	t := time.NewTimer(c.cfg.stopWait)
	select {
	case <-done:
	case <-t.C:
		c.pool.abandoned.Store(true)
	}
	t.Stop()
	c.reap(ctx)
	c.pool.leases.close()
}
