package expset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/expset/expset/internal/store"
)

// Reservation is one expiry event leased by Set.Reserve: its caller makes
// the attempt Expiry.Attempt at it and ends it with Finish, renewing the
// lease with Touch meanwhile when the work lasts. Its methods are safe for
// concurrent use.
type Reservation struct {
	Expiry Expiry // the event; Expiry.Attempt counts this reservation

	mu    sync.Mutex
	c     *consumer // the consumer that holds it: Reserve's, whose next call may run meanwhile
	d     delivery
	token string // the attempt's call token: its lease is the token's
	done  bool   // Finish went through
	lost  error  // the lease was found lost (ErrLeaseLost)
}

// Reserve returns one expiry event of the set's, leased to consumer
// consumerName of the consumer group group, for callers that run their own
// loop (beanstalkd's reserve); Set.Consume is the same with the loop
// built in. Like Consume, it sweeps the set unless given WithoutSweeper:
// the set's Reserve calls in a process share its in-process sweeper, from
// the first call until their shared state ends (below). It blocks until
// an event is there for the group, or ctx ends
// (then it returns ctx's error). An event reserved counts one attempt
// (Expiry.Attempt, exact as under Consume) and is the caller's for the lease
// TTL (WithLeaseTTL, default 30s), which Touch renews; the caller ends it
// with Finish, passing what a Consume handler would return: nil
// acknowledges it, RetryAfter(err, d) delivers it again after d, Bury(err)
// dead-letters it at once, and any other error is a failed attempt, retried
// after WithRetryBackoff's delay, or dead-lettered when it was attempt
// WithMaxAttempts (default 5). A reservation neither finished nor touched
// within the lease TTL goes back to the group, to Reserve or Consume of any
// consumer, as if its handler call had failed without returning: the next
// delivery's attempt is one more, and one that was the last attempt is
// dead-lettered. Reserve and Consume may share a group, and a consumer name
// may reserve many events; the name must not be a running Consume's.
//
// Options: WithLeaseTTL, WithMaxAttempts, WithRetryBackoff (they apply to
// the reservation's Finish), WithPollInterval and WithoutSweeper. A bad group, consumer or
// option, or a set without expiry events, is refused with
// ErrInvalidArgument.
//
// Cost: a Set's Reserve calls in one process share one subscription to
// the shards' wake-ups (one connection, one per shard on Redis Cluster)
// and the in-process sweeper, started by the first call and stopped
// shortly after the last call returned and the last reservation was
// finished or its lease lapsed; a call
// continues where an earlier call of its group and consumer name (with the
// same options) left off (calls at once each take one of those left, up to
// 64), reading first the shards that were woken or yielded events, so a
// loop of Reserve and Finish makes a round trip to read the next event and
// begin its attempt (one script call) and Finish's one; Finish calls that
// come at once share one pipeline. The
// first call of a group makes it on each shard's stream when missing (one
// XGROUP CREATE per shard), and the first call of a consumer removes the
// group's idle consumers (a script per shard), asks every shard for the
// group's pending count (one pipeline) and reads the shards one at a time.
// A read takes up to 10 events: the call begins the first, and the rest
// wait, uncharged, for the next Reserve of the same group and consumer
// name in the process (a read's server cost is mostly finding where the
// group left off); when no Reserve has run for 100ms they are released for
// any consumer to take at once. Idle, it waits
// for a wake-up and sends only what an idle Consume sends: the safety poll
// (each shard's stream read every WithPollInterval, default 10s, or every
// second one while the subscription is up), the subscriptions' PINGs, and
// a claim scan while the group has events pending. Redis failures are reported to Hooks.OnError and retried with
// backoff until ctx ends.
func (s *Set) Reserve(ctx context.Context, group, consumerName string, opts ...ReserveOption) (*Reservation, error) {
	cfg := defaultConsumeConfig()
	cfg.batch = reserveReadAhead // the rest of a read waits for the next Reserve (reserve_ahead.go)
	if err := applyOptions(opts, &cfg, ReserveOption.applyReserve); err != nil {
		return nil, err
	}
	c, err := s.newConsumer(group, consumerName, cfg)
	if err != nil {
		return nil, err
	}
	if c, err = s.reserves.enter(ctx, s, c); err != nil {
		return nil, err
	}
	var r *Reservation
	defer func() { s.reserves.exit(c, r) }()
	_ = s.loop(ctx, "reserve", c.wk.signal, func() (time.Duration, error) {
		c.takeRetries()
		r = c.reserveRound(ctx)
		switch {
		case r != nil:
			return 0, errLoopDone
		case c.anyBusy() || c.reserving.hasAhead(c):
			return 0, nil // shards left unread, or events read ahead: on at once
		}
		return c.idleWait(time.Now()), nil
	})
	if r != nil {
		// Taken, even when ctx ended meanwhile: its attempt is counted.
		_ = c.flushAcks(ctx)
		return r, nil
	}
	c.stop(ctx)
	return nil, ctx.Err() // the loop ends only with r or with ctx
}

// reserveLinger is how long a Set's shared Reserve state outlives its last
// use (see reservers): long enough for a caller's loop to call Reserve
// again after Finish, short enough that a Set no one reserves from is
// soon left without goroutines.
const reserveLinger = 100 * time.Millisecond

// reservers is what a Set's Reserve calls in this process share: one
// subscription to the shards' event wake-ups, the consumers between calls
// (what each knows of the shards: which may hold events, when to poll,
// claim and prune), which record the wake-ups that come meanwhile, and the
// shards where each group was made. The subscription and the consumers
// start with a Reserve call and stop reserveLinger after no call runs and
// no reservation is held (one finished or whose lease lapsed is not), so an
// idle Set runs no goroutine and holds no connection; the groups made are
// remembered as long as the Set (forgotten on NOGROUP and by RemoveGroup).
// The zero value is ready to use.
type reservers struct {
	mu    sync.Mutex
	set   *Set                       // the Set whose Reserve calls these are
	made  map[string][]bool          // group -> the shards where it was made
	idle  map[[2]string][]*consumer  // by group and name: consumers no call uses (at most maxIdleReservers each)
	wakes map[*wakeups]bool          // those of every consumer idle or in a call
	subs  []*subscription            // the wake-up subscriptions (nil: stopped)
	calls int                        // Reserve calls running
	held  map[*Reservation]time.Time // reservations not finished: when their leases end
	ahead map[[2]string]*aheadQueue  // by group and name: events read and not begun (reserve_ahead.go)
	quiet time.Time                  // when the last use ended
	timer *time.Timer                // stops what is unused (expire)
	sweep bool                       // a user of the Set's own sweeper (ownsweeper.go)
}

// maxIdleReservers is the most consumers of one group and name a Set keeps
// between Reserve calls: as many as there are calls of them at once, up to
// this.
const maxIdleReservers = 64

// enter starts a Reserve call of c and returns the consumer it uses: one
// that an earlier call of c's group and name left, when it has c's options
// (so that calls at once each go on from where one left off), else c. A
// call that sweeps (no WithoutSweeper) makes the Set's own sweeper run
// until expire.
func (r *reservers) enter(ctx context.Context, s *Set, c *consumer) (*consumer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !c.cfg.noSweep && !r.sweep {
		if err := s.sweeping.join(ctx, s); err != nil {
			return nil, err
		}
		r.sweep = true
	}
	r.calls++
	r.set = s
	if r.subs == nil {
		r.idle = map[[2]string][]*consumer{}
		r.wakes = map[*wakeups]bool{}
		r.held = map[*Reservation]time.Time{}
		r.subs = s.subscribeWakes("subscribe", func(k *store.Keys) string { return k.EvWake }, r.wake)
	}
	k := [2]string{c.group, c.name}
	if olds := r.idle[k]; len(olds) > 0 {
		old := olds[len(olds)-1]
		r.idle[k] = olds[:len(olds)-1]
		if old.cfg == c.cfg {
			return old, nil
		}
		delete(r.wakes, old.wk)
		s.retryNotes.leave(old)
	}
	c.reserving = r
	c.wk = newWakeups()
	c.wk.heard = r.subs
	r.wakes[c.wk] = true
	s.retryNotes.join(c)
	return c, nil
}

// exit ends a Reserve call of c that returned res (nil: none). c waits for
// a next call of its group and name, unless maxIdleReservers do already.
func (r *reservers) exit(c *consumer, res *Reservation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls--
	k := [2]string{c.group, c.name}
	if len(r.idle[k]) < maxIdleReservers {
		r.idle[k] = append(r.idle[k], c)
	} else {
		delete(r.wakes, c.wk)
		r.set.retryNotes.leave(c)
	}
	now := time.Now()
	r.lapse(now)
	if res != nil {
		r.held[res] = now.Add(c.cfg.leaseTTL)
	}
	r.used()
}

// lapse forgets the reservations whose leases ended by now (r.mu held).
func (r *reservers) lapse(now time.Time) {
	for res, end := range r.held {
		if !end.After(now) {
			delete(r.held, res)
		}
	}
}

// hold records that res's lease now ends at end, or, with a zero end, that
// res was finished.
func (r *reservers) hold(res *Reservation, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.subs == nil:
	case end.IsZero():
		delete(r.held, res)
		r.used()
	default:
		r.held[res] = end
	}
}

// used notes that a use has ended (r.mu held): once none is left, expire
// is due reserveLinger later, or when the last lease held ends.
func (r *reservers) used() {
	if r.calls > 0 {
		return
	}
	r.quiet = time.Now()
	r.schedule()
}

// schedule sets the timer to when expire may stop everything (r.mu held).
func (r *reservers) schedule() {
	at := r.quiet.Add(reserveLinger)
	for _, end := range r.held {
		if end.After(at) {
			at = end
		}
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(time.Until(at), r.expire)
	} else {
		r.timer.Reset(time.Until(at))
	}
}

// expire stops the subscription and forgets the consumers when no call
// runs, no lease is held and reserveLinger has passed since the last use;
// it waits for the subscription's goroutines.
func (r *reservers) expire() {
	r.mu.Lock()
	if r.calls > 0 || r.subs == nil {
		r.mu.Unlock()
		return
	}
	now := time.Now()
	r.lapse(now)
	if len(r.held) > 0 || now.Before(r.quiet.Add(reserveLinger)) {
		r.schedule()
		r.mu.Unlock()
		return
	}
	for _, cs := range r.idle {
		for _, c := range cs {
			r.set.retryNotes.leave(c)
		}
	}
	subs, ahead, sweep, set := r.subs, r.ahead, r.sweep, r.set
	r.subs, r.idle, r.wakes, r.held, r.ahead, r.sweep = nil, nil, nil, nil, nil, false
	r.mu.Unlock()
	releaseAhead(ahead)
	for _, p := range subs {
		p.close()
	}
	if sweep {
		set.sweeping.leave()
	}
}

// wake records a wake-up of shards (see wakeups.wake) for every consumer.
func (r *reservers) wake(shards []int, d int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.wakes {
		w.wake(shards, d)
	}
}

// forget forgets where group was made (RemoveGroup removed it).
func (r *reservers) forget(group string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.made, group)
}

// isGrouped reports whether a Reserve made group on shard i's stream.
func (r *reservers) isGrouped(group string, i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.made[group] != nil && r.made[group][i]
}

// grouped records whether group is on shard i's stream, of n shards.
func (r *reservers) grouped(group string, i, n int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.made == nil {
		r.made = map[string][]bool{}
	}
	if r.made[group] == nil {
		r.made[group] = make([]bool, n)
	}
	r.made[group][i] = ok
}

// reserveRound is one round of Reserve: like Consume's, it claims what is
// due and reads the shards woken, busy or due a safety poll, but begins one
// event at most, whose attempt it hands to the caller.
func (c *consumer) reserveRound(ctx context.Context) *Reservation {
	_ = c.flushAcks(ctx) // left over from a failure: before anything else
	claimed, read, visit := c.survey(ctx, time.Now(), 1)
	// The safety poll: a plain read and the pending count.
	claimed = append(claimed, c.read(ctx, nil, visit, max(1-len(claimed), 0))...)
	if len(claimed) == 0 {
		claimed = c.reserving.takeAhead(c)
	}
	if len(claimed) == 0 {
		claimed = c.reserveRead(ctx, read)
	} else {
		for _, i := range read {
			c.shards[i].busy = true // read them at the next call
		}
	}
	begun := c.beginAll(ctx, claimed)
	_ = c.flushAcks(ctx)
	if len(begun) == 0 {
		return nil
	}
	c.giveBack(ctx, begun[1:]) // none: one event at most
	tc := begun[0]
	return &Reservation{Expiry: tc.e, c: c, d: tc.d, token: tc.token}
}

// errReservation is the error of a Reservation misused.
func errReservation(what string) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, what)
}

// check returns an error for a zero Reservation, one finished, or one
// whose lease was found lost. r.mu is held.
func (r *Reservation) check(op string) error {
	if r.c == nil {
		return errReservation(op + " of a zero Reservation: use one Reserve returned")
	}
	if r.done {
		return errReservation(op + " of a Reservation already finished: Finish once, and Touch only before")
	}
	if r.lost != nil {
		return r.lost
	}
	return nil
}

// Finish ends the reservation's attempt with err, as a Consume handler's
// return value would: nil acknowledges the event; RetryAfter(err, d)
// delivers it again after d; Bury(err) dead-letters it at once; any other
// error is a failed attempt, delivered again after WithRetryBackoff's delay
// or dead-lettered when it was the last attempt (WithMaxAttempts). It costs
// one round trip and runs even when ctx has just ended (for at most 5s).
// Finish acts on this reservation's own lease only: once another call of
// the event has begun (the lease lapsed and another consumer took it), or
// it was dead-lettered meanwhile, Finish changes nothing and returns an
// error matching ErrLeaseLost, as do Finish and Touch after it. When Finish
// returns a Redis error, the reservation stays open and Finish may be
// called again; once it returned nil, Finish and Touch return
// ErrInvalidArgument, as they do for a nil or zero Reservation.
func (r *Reservation) Finish(ctx context.Context, err error) error {
	if r == nil {
		return errReservation("Finish of a nil *Reservation")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cerr := r.check("Finish"); cerr != nil {
		return cerr
	}
	c, d := r.c, r.d
	ctx = context.WithoutCancel(ctx)
	var ferr error
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, finishTimeout)
		held, aerr := c.set.finishes.ack(wctx, c, d.shard, d.id, r.token)
		cancel()
		switch {
		case aerr != nil:
			ferr = aerr
		case !held:
			ferr = leaseLost(d.shard, d.id)
		default:
			c.event(ctx, d.shard, r.Expiry.Attempt, nil, false)
		}
	} else {
		ferr = c.failed(ctx, d, r.Expiry.Attempt, r.token, err)
	}
	switch {
	case errors.Is(ferr, ErrLeaseLost):
		r.lost = ferr
	case ferr != nil:
		return ferr
	default:
		r.done = true
	}
	c.reserving.hold(r, time.Time{})
	return ferr
}

// Touch renews the reservation's lease for another lease TTL, one round
// trip. It returns an error matching ErrLeaseLost when the lease is no
// longer this reservation's: it lapsed and another call of the event has
// begun, or it was acknowledged or dead-lettered; Finish then changes
// nothing either. Touch after Finish returned nil, or of a nil or zero
// Reservation, returns ErrInvalidArgument.
func (r *Reservation) Touch(ctx context.Context) error {
	if r == nil {
		return errReservation("Touch of a nil *Reservation")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.check("Touch"); err != nil {
		return err
	}
	sent := time.Now()
	held, err := r.c.renewNow(ctx, r.d.shard, r.d.id, r.token)
	if err != nil {
		return err
	}
	if !held {
		r.lost = leaseLost(r.d.shard, r.d.id)
		r.c.reserving.hold(r, time.Time{})
		return r.lost
	}
	r.c.reserving.hold(r, sent.Add(r.c.cfg.leaseTTL))
	return nil
}

// renewNow renews the lease of event id of shard held by the call with
// token, in one round trip, and reports whether the call still held it.
func (c *consumer) renewNow(ctx context.Context, shard int, id, token string) (bool, error) {
	return c.set.st.Renew(ctx, c.args(), shard, store.Lease{ID: id, Token: token})
}
