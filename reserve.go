package expset

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Reservation is one expiry event leased by Set.Reserve: its caller makes
// the attempt Expiry.Attempt at it and ends it with Finish, renewing the
// lease with Touch meanwhile when the work lasts. Its methods are safe for
// concurrent use.
type Reservation struct {
	Expiry Expiry // the event; Expiry.Attempt counts this reservation

	mu    sync.Mutex
	c     *consumer // the consumer that holds it (Reserve's, used by no one else)
	d     delivery
	token string // the attempt's call token (begin.lua)
	done  bool   // Finish went through
}

// Reserve returns one expiry event of the set's, leased to consumer
// consumerName of the consumer group group, for callers that run their own
// loop (beanstalkd's reserve); Set.Consume is the same with the loop
// built in. It blocks until an event is there for the group, or ctx ends
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
// the reservation's Finish) and WithPollInterval; WithReadBatch,
// WithMaxHandlingTime, WithConcurrency and WithOwnerConcurrency are refused with
// ErrInvalidArgument, as are a bad group, consumer or option, or a set
// without expiry events.
//
// Cost: each call subscribes to the shards' wake-ups (one connection, one
// per shard on Redis Cluster, held until it returns), makes the group on
// each shard's stream when missing (one XGROUP CREATE per shard), asks
// every shard for the group's pending count in one pipeline, reads one
// event at a time (so that none waits unhandled), a shard a round trip
// until one yields it, and begins its attempt in one round trip: at most
// about two round trips per shard and three more. Idle, it waits for a
// wake-up and sends only what an idle Consume sends: the safety poll (each
// shard's stream read every WithPollInterval, default 10s), the
// subscriptions' PINGs, and a claim scan while the group has events
// pending. Redis failures are reported to Hooks.OnError and retried with
// backoff until ctx ends.
func (s *Set) Reserve(ctx context.Context, group, consumerName string, opts ...ConsumeOption) (*Reservation, error) {
	c, err := s.newConsumer(group, consumerName, nil, opts, true)
	if err != nil {
		return nil, err
	}
	c.wk = s.listen("subscribe", func(k *shardKeys) string { return k.evWake })
	defer c.wk.close()
	var r *Reservation
	_ = s.loop(ctx, "reserve", c.wk.signal, func() (time.Duration, error) {
		r = c.reserveRound(ctx)
		switch {
		case r != nil:
			return 0, errLoopDone
		case c.anyBusy():
			return 0, nil // shards left unread, one event a read: on at once
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

// reserveRound is one round of Reserve: like Consume's, it claims what is
// due and reads the shards woken, busy or due a safety poll, but takes one
// event at most, and begins its attempt instead of a handler call.
func (c *consumer) reserveRound(ctx context.Context) *Reservation {
	_ = c.flushAcks(ctx) // left over from a failure: before anything else
	todo, read, visit := c.survey(ctx, time.Now(), 1)
	todo = append(todo, c.read(ctx, read, visit, 1-len(todo))...)
	for k, d := range todo {
		if ctx.Err() != nil {
			c.release(ctx, todo[k:], nil)
			return nil
		}
		e, _, token, err := c.start(ctx, d)
		if err != nil {
			if !errors.Is(err, errAcksPending) { // else reported
				c.fail(ctx, d.shard, err)
			}
			continue
		}
		if e.Attempt > 0 {
			c.release(ctx, todo[k+1:], nil)
			return &Reservation{Expiry: e, c: c, d: d, token: token}
		}
	}
	return nil
}

// errReservation is the error of a Reservation misused.
func errReservation(what string) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, what)
}

// check returns an error for a nil or zero Reservation, or one finished.
// r.mu is held, but for a nil r.
func (r *Reservation) check(op string) error {
	if r.c == nil {
		return errReservation(op + " of a zero Reservation: use one Reserve returned")
	}
	if r.done {
		return errReservation(op + " of a Reservation already finished: Finish once, and Touch only before")
	}
	return nil
}

// Finish ends the reservation's attempt with err, as a Consume handler's
// return value would: nil acknowledges the event; RetryAfter(err, d)
// delivers it again after d; Bury(err) dead-letters it at once; any other
// error is a failed attempt, delivered again after WithRetryBackoff's delay
// or dead-lettered when it was the last attempt (WithMaxAttempts). It costs
// one round trip and runs even when ctx has just ended (for at most 5s). A
// reservation whose lease lapsed and went to another consumer is left to
// that consumer by a failure; nil acknowledges it still, as under Consume.
// When Finish returns a Redis error, the reservation stays open and Finish
// may be called again; once it returned nil, Finish and Touch return
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
		c.event(ctx, d.shard, r.Expiry.Attempt, nil, false)
		c.clearAcks()
		c.addAck(d.shard, d.id, time.Now())
		ferr = c.flushAcks(ctx)
	} else {
		ferr = c.failed(ctx, d, r.Expiry.Attempt, r.token, err)
	}
	if ferr != nil {
		return ferr
	}
	r.done = true
	return nil
}

// Touch renews the reservation's lease for another lease TTL, one round
// trip. It returns ErrLeaseLost when the lease was lost: it lapsed and
// another consumer took the event, or it was acknowledged or dead-lettered.
// Touch after Finish returned nil, or of a nil or zero Reservation, returns
// ErrInvalidArgument.
func (r *Reservation) Touch(ctx context.Context) error {
	if r == nil {
		return errReservation("Touch of a nil *Reservation")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.check("Touch"); err != nil {
		return err
	}
	held, err := r.c.renew(ctx, r.d.shard, r.d.id)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("%w: event %s of shard %d is no longer this reservation's", ErrLeaseLost, r.d.id, r.d.shard)
	}
	return nil
}
