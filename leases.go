package expset

import (
	"context"
	"sync"
	"time"

	"github.com/expset/expset/internal/store"
)

// leaseKeeper is the lease side of Consume's engine: it renews the leases
// of the running handler calls and sends the acknowledgements of the
// handled events, on a goroutine of its own, so that neither waits for the
// reader. It is the one place acknowledgements are batched. Each of its
// sends is one pipeline: a renewal (renew.lua, one per shard) of every
// call due within half a beat, and the acknowledgements waiting when they
// are due (ack.lua, one per shard), so n calls cost about one round trip a
// beat instead of n. While Consume runs, the consumer's acknowledgement
// buffer (c.acks, c.ackDue) is the keeper's, under mu.
type leaseKeeper struct {
	c       *consumer
	ctx     context.Context // Consume's: errors are reported with it
	mu      sync.Mutex
	calls   map[*leaseCall]struct{}
	failing bool           // the last acknowledgements sent failed
	sent    [][]pendingAck // the acknowledgements of the send under way, per shard
	freed   []string       // the group call slots to free (WithGroupConcurrency), sent at once
	bo      backoff        // how soon acknowledgements that failed are sent again
	closed  bool           // close was called: calls left running settle nothing
	kick    chan struct{}  // a call joined or an acknowledgement came (buffer 1)
	sending sync.Mutex     // held while a send is out
	stop    chan struct{}
	done    chan struct{}
}

// leaseCall is one running handler call's lease.
type leaseCall struct {
	shard  int
	id     string
	token  string    // the call's token: the lease is the call's while the event's attempts field carries it
	slot   bool      // token is a group call slot's, renewed with the lease (WithGroupConcurrency)
	leased time.Time // when the last renewal that succeeded was sent (or the lease taken)
	next   time.Time // when the next renewal is due
	gone   bool      // a renewal found the lease no longer the call's
	lost   context.CancelCauseFunc
}

func newLeaseKeeper(c *consumer) *leaseKeeper {
	return &leaseKeeper{c: c, calls: map[*leaseCall]struct{}{}, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
		bo: backoff{max: min(c.beat, time.Second)}}
}

// start starts the keeper's goroutine; close stops it (what is still
// waiting to be acknowledged stays in the buffer, for Consume's stop, and
// the calls still running settle nothing).
func (k *leaseKeeper) start(ctx context.Context) {
	k.ctx = ctx
	go k.run()
}

func (k *leaseKeeper) close() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
	close(k.stop)
	<-k.done
	k.freeLast()
}

// freeLast frees the group call slots of the calls that ended after the
// keeper's last send (WithGroupConcurrency), as it closes. Best effort:
// Consume's context has ended, so there is no one to report to, and a
// slot not freed lapses with its lease.
func (k *leaseKeeper) freeLast() {
	k.mu.Lock()
	freed := k.freed
	k.freed = nil
	k.mu.Unlock()
	if len(freed) == 0 || k.c.gslots == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), finishTimeout)
	defer cancel()
	k.c.set.st.RunPipelined(ctx, k.c.slotCalls(store.Batches[int, *leaseCall]{}, freed).calls())
}

// freeSlots has the group call slots of tokens freed (WithGroupConcurrency)
// at the keeper's next send, which it wakes. Once the keeper is closed it
// frees nothing: a call left running then keeps its slot until its lease
// lapses. A free that fails is reported; the slot lapses with its lease.
func (k *leaseKeeper) freeSlots(tokens ...string) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.freed = append(k.freed, tokens...)
	k.mu.Unlock()
	k.wake()
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
		if len(k.freed) > 0 {
			wait = 0
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

// running adds to keys the key (parkKey) of every call under way and of
// every event whose acknowledgement waits or is being sent.
func (k *leaseKeeper) running(keys map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for lc := range k.calls {
		keys[parkKey(delivery{shard: lc.shard, id: lc.id})] = true
	}
	for _, waiting := range [][][]pendingAck{k.c.acks, k.sent} {
		for shard, acks := range waiting {
			for _, a := range acks {
				keys[parkKey(delivery{shard: shard, id: a.ID})] = true
			}
		}
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

// ack adds the acknowledgement of event id of shard, handled by the call
// with token under a lease started at leased, to those waiting (addAck).
// It reports false, adding nothing, once the keeper is closed.
func (k *leaseKeeper) ack(shard int, id, token string, leased time.Time) bool {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return false
	}
	full := k.c.addAck(shard, id, token, leased)
	k.mu.Unlock()
	if full {
		k.flush()
	} else {
		k.wake()
	}
	return true
}

// handled settles a handler call of attempt, with token, that returned nil
// under a lease last renewed at leased: its acknowledgement waits with
// others, but for a last attempt (a claim of the event after a crash would
// take its call for one that never returned and bury it) and a call that
// took its owner's last free slot (full: the owner's next events wait for
// the slot it frees), which go at once, with those waiting.
func (k *leaseKeeper) handled(ctx context.Context, shard int, id, token string, attempt int, leased time.Time, full bool) {
	k.c.event(ctx, shard, attempt, nil, false)
	if k.ack(shard, id, token, leased) && (attempt >= k.c.cfg.maxAttempts || full) {
		k.flush()
	}
}

// send sends, in one pipeline, the renewals of every lease due within half
// a beat (one renew.lua call per shard) and the acknowledgements waiting,
// when they are due or all is set. A renewal that finds the lease no longer
// the call's (another call of the event has begun, or it was acknowledged
// or dead-lettered) ends the call's context with ErrLeaseLost; one that
// fails for a Redis error is reported and tried again soon (within a
// second, and a beat at most). Acknowledgements that fail are reported and
// kept, and sent again after a backoff of at most a second; meanwhile
// acksFailing holds the reader back.
func (k *leaseKeeper) send(all bool) {
	c := k.c
	k.sending.Lock()
	defer k.sending.Unlock()
	now := time.Now()
	var due store.Batches[int, *leaseCall] // the leases each renewal call renews
	k.mu.Lock()
	for lc := range k.calls {
		if lc.next.Sub(now) > c.beat/2 {
			continue
		}
		due.Add(lc.shard, lc)
	}
	calls := c.renewCalls(due)
	slots := c.slotCalls(due, k.freed)
	k.freed = nil
	var acks []ackBatch
	if all || c.acksDue(now) {
		acks = c.ackCalls()
		k.sent = c.acks
		c.acks = make([][]pendingAck, len(c.acks))
		c.ackDue = time.Time{}
	}
	k.mu.Unlock()
	if len(calls)+len(slots.renews)+len(slots.frees)+len(acks) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), max(c.beat, time.Second))
	c.set.st.RunPipelined(sctx, append(append(calls, slots.calls()...), callsOf(acks)...))
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sent = nil
	k.renewed(calls, due.Items, now)
	k.slotsSent(slots, now)
	if len(acks) == 0 {
		return
	}
	failed := c.requeueAcks(acks)
	wasFailing := k.failing
	k.failing = false
	for _, a := range failed {
		if !store.IsNoGroup(a.call.Err) {
			k.failing = true
		}
	}
	if !k.failing {
		k.bo.ok()
		if wasFailing && c.wk != nil {
			c.wk.poke() // the reader waits for this
		}
		return
	}
	wait := k.bo.fail()
	c.ackDue = now.Add(wait)
	for _, a := range failed {
		c.set.reportError(k.ctx, "consume", a.shard, a.call.Err, wait)
	}
}

// renewCalls returns the renew.lua calls of due, one per batch.
func (c *consumer) renewCalls(due store.Batches[int, *leaseCall]) []*store.Call {
	calls := make([]*store.Call, len(due.Items))
	for j, lcs := range due.Items {
		leases := make([]store.Lease, len(lcs))
		for i, lc := range lcs {
			leases[i] = store.Lease{ID: lc.id, Token: lc.token}
		}
		calls[j] = c.set.st.RenewCall(c.args(), due.Keys[j], leases)
	}
	return calls
}

// renewed settles the renewals sent at now: calls, each renewing the
// leases of due (k.mu held).
func (k *leaseKeeper) renewed(calls []*store.Call, due [][]*leaseCall, now time.Time) {
	c := k.c
	again := min(c.beat, time.Second)
	for j, r := range calls {
		held, err := store.ReadRenew(r, len(due[j]))
		for i, lc := range due[j] {
			if err != nil {
				lc.next = now.Add(again)
				continue
			}
			if !held[i] {
				lc.gone = true
				lc.lost(ErrLeaseLost)
				lc.next = now.Add(c.beat)
				continue
			}
			lc.leased, lc.next = now, now.Add(c.beat)
		}
		if err != nil {
			c.set.reportError(k.ctx, "consume", r.Shard, err, again)
		}
	}
}

// call makes one handler call of e, with token (a group call slot's when
// slot), whose lease was taken at leased, its renewals sent by the keeper. The handler's context ends with
// ctx, when a renewal finds the lease no longer the call's (cause
// ErrLeaseLost), or after WithMaxHandlingTime (context.DeadlineExceeded).
// Renewals go on after that until the handler returns: no other consumer
// takes an event whose call still runs. call returns when the last renewal
// that succeeded was sent, whether the lease was found lost (the call's
// outcome then changes nothing), and the handler's error.
func (k *leaseKeeper) call(ctx context.Context, shard int, id, token string, slot bool, e Expiry, leased time.Time) (time.Time, bool, error) {
	c := k.c
	hctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	hctx, cancel := context.WithTimeout(hctx, c.cfg.maxHandling)
	defer cancel()
	lc := &leaseCall{shard: shard, id: id, token: token, slot: slot, leased: leased, next: leased.Add(c.beat), lost: lost}
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
	return lc.leased, lc.gone, err
}
