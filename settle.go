package expset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/expset/expset/internal/store"
)

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

// failed settles a handler call of d, attempt, whose call token is token,
// that returned herr (not nil), even when ctx has just ended: the event is
// dead-lettered (Bury, or its last attempt), given back (Consume is
// stopping) or delivered again after its retry delay. It touches nothing of
// the consumer but Redis and its retry notes (a Consume's calls run it on
// their own goroutines) and returns Redis errors, and an error matching
// ErrLeaseLost when the call's lease is no longer its own (nothing
// changed then).
func (c *consumer) failed(ctx context.Context, d delivery, attempt int, token string, herr error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	done := true
	var err error
	switch {
	case handlerBuries(herr):
		// The handler buried it (Bury): at once, whatever attempts are left.
		done, err = c.bury(wctx, d.shard, d.id, 0, herr.Error(), token)
		c.event(ctx, d.shard, attempt, herr, done)
	case ctx.Err() != nil && errors.Is(herr, ctx.Err()):
		// Consume is stopping and the call failed for that (its
		// context ended): the failure is not the event's, so the
		// attempt is given back and the event released. A failure of
		// the handler's own counts, as at any other time.
		c.event(ctx, d.shard, attempt, herr, false)
		return c.releaseShard(wctx, d.shard, []string{d.id}, d.id, token)
	case attempt >= c.cfg.maxAttempts:
		done, err = c.bury(wctx, d.shard, d.id, c.cfg.maxAttempts, herr.Error(), token)
		c.event(ctx, d.shard, attempt, herr, done)
	default:
		// Delivered again after its retry delay (retry.go).
		c.event(ctx, d.shard, attempt, herr, false)
		done, err = c.retry(wctx, d.shard, d.id, token, c.retryDelay(herr, attempt))
	}
	if err == nil && !done {
		err = leaseLost(d.shard, d.id)
	}
	return err
}

// leaseLost is the error of a call whose lease is no longer its own.
func leaseLost(shard int, id string) error {
	return fmt.Errorf("%w: event %s of shard %d: another call of it has begun, or it was acknowledged or dead-lettered", ErrLeaseLost, id, shard)
}

// args returns the consumer's arguments of the engine's scripts: the same
// in each of its calls.
func (c *consumer) args() store.Consumer {
	return store.Consumer{Group: c.group, Name: c.name, Lease: c.cfg.leaseTTL, MaxAttempts: c.cfg.maxAttempts, OwnerCap: c.cfg.ownerCap}
}

// addAck adds the acknowledgement of event id of shard, handled by the
// call with token under a lease started at leased, to those waiting, to be
// sent within maxAckDelay and before the lease has run for a third of the
// lease TTL, and reports whether its shard's batch is full.
func (c *consumer) addAck(shard int, id, token string, leased time.Time) (full bool) {
	c.acks[shard] = append(c.acks[shard], pendingAck{ID: id, Token: token})
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

// pendingAck is an acknowledgement waiting in a consumer's buffer: the
// event's ID and the token of the call that handled it ("" for an event
// not meant for the group, which no call began), as ack.lua takes it.
type pendingAck = store.Lease

// ackBatch is one ack.lua call of a consumer's buffer: its shard and the
// acknowledgements it sends.
type ackBatch struct {
	call  *store.Call
	shard int
	acks  []pendingAck
}

// ackCalls returns the ack.lua calls for the acknowledgements waiting.
func (c *consumer) ackCalls() []ackBatch {
	var out []ackBatch
	for i, acks := range c.acks {
		for len(acks) > 0 {
			batch := acks[:min(len(acks), maxBatch)]
			acks = acks[len(batch):]
			out = append(out, ackBatch{c.set.st.AckCall(c.args(), i, batch), i, batch})
		}
	}
	return out
}

// callsOf returns the calls of batches.
func callsOf(batches []ackBatch) []*store.Call {
	calls := make([]*store.Call, len(batches))
	for i, b := range batches {
		calls[i] = b.call
	}
	return calls
}

// ackDone drops the acknowledgements that went through; those that failed
// stay, their shards back off, and the first error is returned.
func (c *consumer) ackDone(ctx context.Context, batches []ackBatch) error {
	var first error
	for _, a := range c.ackSettle(batches) {
		c.fail(ctx, a.shard, a.call.Err)
		if first == nil {
			first = a.call.Err
		}
	}
	return first
}

// ackSettle drops the acknowledgements of batches (all of them, when
// batches holds every one waiting, as ackCalls made them) that went
// through, keeps those that failed and returns their batches.
func (c *consumer) ackSettle(batches []ackBatch) []ackBatch {
	if len(batches) == 0 {
		return nil
	}
	c.clearAcks()
	return c.requeueAcks(batches)
}

// clearAcks empties the acknowledgement buffer.
func (c *consumer) clearAcks() {
	for i := range c.acks {
		c.acks[i] = c.acks[i][:0]
	}
	c.ackDue = time.Time{}
}

// requeueAcks puts the acknowledgements of the batches whose calls failed
// back in the buffer, due at once (but those of a stream that is gone:
// nothing to acknowledge there), and returns the batches that failed.
func (c *consumer) requeueAcks(batches []ackBatch) []ackBatch {
	var failed []ackBatch
	for _, a := range batches {
		if a.call.Err == nil {
			continue
		}
		failed = append(failed, a)
		if store.IsNoGroup(a.call.Err) {
			// The stream is gone, and the event with it: nothing to
			// acknowledge.
			continue
		}
		c.acks[a.shard] = append(c.acks[a.shard], a.acks...)
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
	c.set.st.RunPipelined(wctx, callsOf(acks))
	return c.ackDone(ctx, acks)
}

// bury dead-letters d if it is still this consumer's with at least need
// attempts used.
func (c *consumer) bury(ctx context.Context, shard int, id string, need int, reason, token string) (bool, error) {
	return c.set.st.Bury(ctx, c.args(), store.BuryArgs{Shard: shard, Lease: store.Lease{ID: id, Token: token}, Need: need, Reason: reason})
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
	return c.set.st.Release(ctx, c.args(), shard, ids, store.Lease{ID: refund, Token: token})
}

// stop settles what a stopping Consume leaves: acknowledgements waiting,
// and its own entry in each shard's group when it holds nothing there (one
// pipeline for every shard).
func (c *consumer) stop(ctx context.Context) {
	_ = c.flushAcks(ctx)
	c.releaseParked(ctx)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	var grouped []int
	for i := range c.shards {
		if c.shards[i].grouped {
			grouped = append(grouped, i)
		}
	}
	// Best effort: ctx has ended, so there is no one to report to; a
	// periodic prune of another consumer finishes what fails here.
	_ = c.set.st.Leave(wctx, c.group, c.name, grouped)
}

// event reports one handler call, or one burial without a call, to
// Hooks.OnEvent.
func (c *consumer) event(ctx context.Context, shard, attempt int, err error, buried bool) {
	if h := c.set.hooks.OnEvent; h != nil {
		h(ctx, CallInfo{Set: c.set.name, Op: "event", Shard: shard, Err: err}, EventInfo{Group: c.group, Attempt: attempt, DeadLettered: buried})
	}
}

// giveBack releases events beginAll began and no call was started for
// (Consume is stopping), giving their attempts back.
func (c *consumer) giveBack(ctx context.Context, taken []takenCall) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	for _, tc := range taken {
		_ = c.releaseShard(wctx, tc.d.shard, []string{tc.d.id}, tc.d.id, tc.token) // ctx has ended: nothing to report to
	}
}

// ackCommit acknowledges the events of calls that end one by one
// (Reservation.Finish) in shared script calls: the first caller sends its
// acknowledgement at once, and those that come while a send is out wait
// for it and go together in the next send (group commit), so calls at once
// share script calls with no added wait. The zero value is ready to use;
// it is safe for simultaneous use.
type ackCommit struct {
	mu      sync.Mutex
	queue   []*ackWaiter
	sending bool
}

// ackWaiter is one acknowledgement waiting in an ackCommit, and its
// outcome.
type ackWaiter struct {
	c        *consumer
	shard    int
	ack      pendingAck
	held     bool
	err      error
	finished chan struct{}
}

// ack acknowledges event id of shard, handled by c's call with token, and
// reports whether the call still held it.
func (a *ackCommit) ack(ctx context.Context, c *consumer, shard int, id, token string) (bool, error) {
	w := &ackWaiter{c: c, shard: shard, ack: pendingAck{ID: id, Token: token}, finished: make(chan struct{})}
	a.mu.Lock()
	a.queue = append(a.queue, w)
	lead := !a.sending
	a.sending = true
	a.mu.Unlock()
	if lead {
		a.send(ctx)
	}
	<-w.finished
	return w.held, w.err
}

// send sends what waits, in one pipeline of ack.lua calls (one per group
// and shard), until nothing does.
func (a *ackCommit) send(ctx context.Context) {
	for {
		a.mu.Lock()
		batch := a.queue
		a.queue = nil
		if len(batch) == 0 {
			a.sending = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		type key struct {
			group string
			shard int
		}
		var bs store.Batches[key, *ackWaiter]
		for _, w := range batch {
			bs.Add(key{w.c.group, w.shard}, w)
		}
		calls := make([]*store.Call, len(bs.Items))
		for j, of := range bs.Items {
			leases := make([]store.Lease, len(of))
			for i, w := range of {
				leases[i] = w.ack
			}
			calls[j] = of[0].c.set.st.AckCall(of[0].c.args(), of[0].shard, leases)
		}
		batch[0].c.set.st.RunPipelined(ctx, calls)
		for j, call := range calls {
			held, err := store.ReadAck(call, len(bs.Items[j]))
			for i, w := range bs.Items[j] {
				if w.err = err; err == nil {
					w.held = held[i]
				}
				close(w.finished)
			}
		}
	}
}
