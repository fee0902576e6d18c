package expset

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// The waiting contract's two numbers (docs/waiting.md). A waiter's ticket
// lives WaitLease after its last renewal; each process renews the tickets of
// all its waiters on one owner with one script call every waitRenew. A
// waiter whose process crashes or stalls for longer than waitLease -
// waitRenew loses its place; the line moves on within waitLease + waitRenew
// of its last renewal.
const (
	waitLease = 5 * time.Second
	waitRenew = time.Second
)

// waitCleanup bounds the calls that give up a place after the caller's
// context ended (they run on a context of their own).
const waitCleanup = 5 * time.Second

// AcquireWait is Acquire that waits for a slot instead of being denied: when
// the owner is at its limit, the caller joins the owner's wait line and is
// admitted when it reaches the head of the line and a slot is free. Waiters
// of one owner are admitted in the order they joined, across processes, and
// while anyone waits a plain Acquire of a new member cannot take a slot the
// line needs. A Release or Remove of the owner's member wakes the head at
// once (pub/sub); an expiry wakes it at the deadline it was told.
//
// It returns the Decision of the admission (Allowed, with the member's
// Deadline counted from the admission), or, when ctx ends first, the
// context's error: the caller then holds no slot and its place is gone.
// While it waits it costs Redis one keep-alive call per second per owner
// and process (shared by every waiter of that process), and nothing else.
// With WithEvictOldest it never waits: it is Acquire. Arguments and options
// are Acquire's, with the same errors. Safe for simultaneous use; a Set's
// waiters share one subscription per shard and one keep-alive goroutine,
// which stop when the last waiter returns.
func (q *Quota) AcquireWait(ctx context.Context, owner, member string, ttl time.Duration, opts ...AcquireOption) (Decision, error) {
	c, err := q.prepare(owner, member, ttl, opts)
	if err != nil {
		return Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	d, err := q.acquire(ctx, c)
	if err != nil || d.Allowed || q.evict {
		return d, err
	}
	return q.set.waiting.wait(ctx, q.set, c, owner, member)
}

// wait queues a denied Acquire until it is admitted or ctx ends.
func (r *waitRoom) wait(ctx context.Context, s *Set, c store.Acquire, owner, member string) (Decision, error) {
	start := time.Now()
	w, err := r.enter(ctx, s, owner, c.Limit)
	if err != nil {
		return Decision{}, s.waited(ctx, w, start, false, err)
	}
	defer r.exit(w)

	// The waiter's call: acquire.lua with flag w, holding the ticket.
	call := s.st.Waiter(c, w.ticket, waitLease)

	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var timerC <-chan time.Time
	backoff := 10 * time.Millisecond
	uncertain := false // a call may have admitted the member without our knowing
	for {
		sd, q, queued, err := call.Acquire(ctx)
		uncertain = err != nil
		if err == nil {
			backoff = 10 * time.Millisecond
			if !queued {
				d, _ := s.decided(ctx, c, sd, nil)
				if d.Existing {
					// The member held a slot already (held before, or a
					// retried admission): no ticket may stay behind.
					r.leave(s, w)
				}
				return d, s.waited(ctx, w, start, true, nil)
			}
			w.rank.Store(int64(q.Rank))
			timerC = nil
			if q.Rank == 0 {
				// The head waits for the earliest deadline, unless a
				// wake-up comes first.
				if timer == nil {
					timer = time.NewTimer(q.Retry)
				} else {
					timer.Reset(q.Retry)
				}
				timerC = timer.C
			}
		}
		if err != nil {
			if ctx.Err() != nil || !transient(err) {
				return Decision{}, s.waited(ctx, w, start, false, r.giveUp(s, w, owner, member, uncertain, err))
			}
			// A transient failure (the connection, a failover): try again,
			// holding the place, until ctx ends.
			s.reportError(ctx, "wait", w.shard, err, backoff)
			if timer == nil {
				timer = time.NewTimer(backoff)
			} else {
				timer.Reset(backoff)
			}
			timerC = timer.C
			backoff = min(2*backoff, waitRenew)
		}
		select {
		case <-ctx.Done():
			return Decision{}, s.waited(ctx, w, start, false, r.giveUp(s, w, owner, member, uncertain, ctx.Err()))
		case <-w.wake:
		case <-timerC:
		}
	}
}

// giveUp ends a wait that will not be admitted: it leaves the line and,
// when the last call's outcome is unknown (it may have admitted the member
// before ctx ended), releases the member, so the caller holds nothing. It
// returns err, with the error of the clean-up when that failed too.
func (r *waitRoom) giveUp(s *Set, w *waiter, owner, member string, uncertain bool, err error) error {
	lerr := r.leave(s, w)
	if uncertain {
		ctx, cancel := context.WithTimeout(context.Background(), waitCleanup)
		defer cancel()
		if _, rerr := s.Remove(ctx, owner, member); rerr != nil && lerr == nil {
			lerr = rerr
		}
	}
	if lerr != nil {
		return fmt.Errorf("%w (and giving up the place failed: %v)", err, lerr)
	}
	return err
}

// leave removes w's ticket from its line, telling the next head when w was
// the head.
func (r *waitRoom) leave(s *Set, w *waiter) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitCleanup)
	defer cancel()
	return s.st.WaitLeave(ctx, w.owner, w.ticket)
}

// waited reports a finished wait to Hooks.OnWait and returns err.
func (s *Set) waited(ctx context.Context, w *waiter, start time.Time, admitted bool, err error) error {
	if s.hooks.OnWait != nil {
		shard := -1
		if w != nil {
			shard = w.shard
		}
		s.hooks.OnWait(ctx, CallInfo{Set: s.name, Op: "wait", Shard: shard, Duration: time.Since(start), Err: err})
	}
	return err
}

// transient reports whether err may heal by itself: a network error, a
// pool with no free connection in time, or a server that is loading,
// failing over or busy. Anything else (a wrong key
// type, a closed client) ends the wait.
func transient(err error) bool {
	if isNetError(err) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "BUSY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// ticketID returns a fresh ticket: the room's random prefix and a sequence.
func (r *waitRoom) ticketID() string {
	r.seq++
	return r.id + "-" + strconv.FormatUint(r.seq, 10)
}

// waitRoom holds a Set's waiters in this process: their tickets, one wake-up
// subscription per shard that has waiters, and one keep-alive goroutine.
// Everything starts with the first waiter and stops when the last one
// leaves, so an idle Set runs no goroutine and holds no connection. The zero
// value is ready to use.
type waitRoom struct {
	mu      sync.Mutex
	id      string                        // random ticket prefix, set on first use
	seq     uint64                        // tickets issued
	waiters map[string]*waiter            // by ticket
	lines   map[string]map[string]*waiter // owner -> ticket -> waiter
	subs    map[int]*subscription         // by shard
	keep    *keepAlive                    // nil when no one waits
}

// waiter is one AcquireWait in progress.
type waiter struct {
	ticket string
	shard  int
	limit  int
	owner  string        // the owner whose line it is in
	wake   chan struct{} // a wake-up for this waiter (buffer 1)
	rank   atomic.Int64  // its rank at its last call (-1 before the first)
}

// signal wakes w without blocking; a wake-up already pending is enough.
func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// enter registers a waiter for owner and returns once the shard's wake-up
// subscription is in place, so no wake-up sent after its first call is
// missed.
func (r *waitRoom) enter(ctx context.Context, s *Set, owner string, limit int) (*waiter, error) {
	sk := &s.shards[s.ShardOf(owner)]
	r.mu.Lock()
	if r.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		r.id = hex.EncodeToString(b[:])
		r.waiters = map[string]*waiter{}
		r.lines = map[string]map[string]*waiter{}
		r.subs = map[int]*subscription{}
	}
	w := &waiter{ticket: r.ticketID(), shard: s.ShardOf(owner), limit: limit,
		owner: owner, wake: make(chan struct{}, 1)}
	w.rank.Store(-1)
	r.waiters[w.ticket] = w
	line := r.lines[w.owner]
	if line == nil {
		line = map[string]*waiter{}
		r.lines[w.owner] = line
	}
	line[w.ticket] = w
	sub := r.subs[w.shard]
	if sub == nil {
		// Each wake-up names a ticket; every (re)subscription after the
		// first asks the keep-alive to run at once, which wakes any head
		// whose wake-up was lost meanwhile.
		sub = s.subscribe(subscriber{op: "wait-subscribe", shard: w.shard, channels: []string{sk.Wake},
			message: func(m *redis.Message) { r.wakeTicket(m.Payload) }, resubscribed: r.kick})
		r.subs[w.shard] = sub
	}
	if r.keep == nil {
		r.keep = newKeepAlive(r, s)
	}
	r.mu.Unlock()

	select {
	case <-sub.ready:
	case <-ctx.Done():
		r.exit(w)
		return w, ctx.Err()
	}
	if sub.err != nil {
		r.exit(w)
		return w, sub.err
	}
	return w, nil
}

// exit unregisters w; the last waiter of a shard closes its subscription,
// the last waiter of all stops the keep-alive. It waits for what it stops.
func (r *waitRoom) exit(w *waiter) {
	r.mu.Lock()
	if r.waiters[w.ticket] != w {
		r.mu.Unlock()
		return
	}
	delete(r.waiters, w.ticket)
	line := r.lines[w.owner]
	delete(line, w.ticket)
	if len(line) == 0 {
		delete(r.lines, w.owner)
	}
	var sub *subscription
	if !r.shardBusy(w.shard) {
		sub = r.subs[w.shard]
		delete(r.subs, w.shard)
	}
	var keep *keepAlive
	if len(r.waiters) == 0 {
		keep, r.keep = r.keep, nil
	}
	r.mu.Unlock()
	if sub != nil {
		sub.close()
	}
	if keep != nil {
		keep.stop()
	}
}

// shardBusy reports whether a waiter of shard remains (r.mu held).
func (r *waitRoom) shardBusy(shard int) bool {
	for _, w := range r.waiters {
		if w.shard == shard {
			return true
		}
	}
	return false
}

// wakeTicket wakes the waiter holding ticket, if it is in this process.
func (r *waitRoom) wakeTicket(ticket string) {
	r.mu.Lock()
	w := r.waiters[ticket]
	r.mu.Unlock()
	if w != nil {
		w.signal()
	}
}

// keepAlive renews the leases of the room's tickets every waitRenew: one
// script call per owner line, whatever the number of waiters on it.
type keepAlive struct {
	kick   chan struct{} // run now, waking every local head (a wake-up may have been lost)
	cancel context.CancelFunc
	done   chan struct{}
}

func newKeepAlive(r *waitRoom, s *Set) *keepAlive {
	ctx, cancel := context.WithCancel(context.Background())
	k := &keepAlive{kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go k.run(ctx, r, s)
	return k
}

func (k *keepAlive) stop() {
	k.cancel()
	<-k.done
}

// kick makes the keep-alive run now.
func (r *waitRoom) kick() {
	r.mu.Lock()
	k := r.keep
	r.mu.Unlock()
	if k != nil {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
}

func (k *keepAlive) run(ctx context.Context, r *waitRoom, s *Set) {
	defer close(k.done)
	t := time.NewTicker(waitRenew)
	defer t.Stop()
	for {
		force := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-k.kick:
			force = true
		}
		r.renewAll(ctx, s, force)
	}
}

// renewAll renews every line's tickets of this process; it wakes a local
// head that does not know it is the head (or every local head, with force:
// after a re-subscription, when a wake-up may have been lost) and every
// waiter whose ticket lapsed (it joins again, at the back).
func (r *waitRoom) renewAll(ctx context.Context, s *Set, force bool) {
	type batch struct {
		owner   string
		shard   int
		tickets []string
	}
	var batches []batch
	r.mu.Lock()
	for owner, line := range r.lines {
		b := batch{owner: owner}
		for t, w := range line {
			b.shard = w.shard
			b.tickets = append(b.tickets, t)
			if len(b.tickets) == maxBatch {
				batches = append(batches, b)
				b = batch{owner: owner, shard: w.shard}
			}
		}
		if len(b.tickets) > 0 {
			batches = append(batches, b)
		}
	}
	r.mu.Unlock()
	for _, b := range batches {
		rn, err := s.st.WaitRenew(ctx, b.owner, waitLease, b.tickets)
		if err != nil {
			// The next round retries; the tickets' leases outlast a few
			// failed rounds.
			s.reportError(ctx, "wait-renew", b.shard, err, waitRenew)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		r.mu.Lock()
		if rn.Head != "" {
			if w := r.waiters[rn.Head]; w != nil && (force || w.rank.Load() != 0) {
				w.signal()
			}
		}
		for _, t := range rn.Lost {
			if r.waiters[t] != nil {
				r.waiters[t].signal()
			}
		}
		r.mu.Unlock()
	}
}

func netTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
