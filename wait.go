package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
func (q *Quota) AcquireWait(ctx context.Context, owner, member string, ttl time.Duration, opts ...CallOption) (Decision, error) {
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
func (r *waitRoom) wait(ctx context.Context, s *Set, c acquireCall, owner, member string) (Decision, error) {
	start := time.Now()
	w, err := r.enter(ctx, s, owner, c.limit)
	if err != nil {
		return Decision{}, s.waited(ctx, w, start, false, err)
	}
	defer r.exit(w)

	// The waiter's call: acquire.lua with flag w, the leases key before the
	// line key, and the ticket and lease after the other arguments.
	keys := append(s.ownerKeys(owner), w.keys[0], w.keys[1])
	args := append(append([]any(nil), c.args...), w.ticket, waitLease.Milliseconds())
	args[4] = args[4].(string) + "w"

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
		v, err := s.run(ctx, "acquire", c.shard, scriptAcquire, keys, args...)
		uncertain = err != nil
		if err == nil {
			backoff = 10 * time.Millisecond
			rank, retry, queued, perr := parseQueued(v)
			if perr != nil {
				err, uncertain = perr, true
			} else if !queued {
				d, err := s.decided(ctx, acquireCall{shard: c.shard, keys: keys, limit: c.limit}, v)
				if err == nil {
					if d.Existing {
						// The member held a slot already (held before, or a
						// retried admission): no ticket may stay behind.
						r.leave(s, w)
					}
					return d, s.waited(ctx, w, start, true, nil)
				}
				uncertain = true
				return Decision{}, s.waited(ctx, w, start, false, r.giveUp(s, w, owner, member, uncertain, err))
			} else {
				w.rank.Store(int64(rank))
				timerC = nil
				if rank == 0 {
					// The head waits for the earliest deadline, unless a
					// wake-up comes first.
					if timer == nil {
						timer = time.NewTimer(retry)
					} else {
						timer.Reset(retry)
					}
					timerC = timer.C
				}
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

// parseQueued reads a waiter's denial, {3, count, rank, retry}; queued is
// false for any other reply (an admission, parsed by parseDecision).
func parseQueued(v any) (rank int, retry time.Duration, queued bool, err error) {
	xs, ok := v.([]any)
	if !ok || len(xs) != 4 {
		return 0, 0, false, nil
	}
	if st, ok := asInt64(xs[0]); !ok || st != 3 {
		return 0, 0, false, nil
	}
	r, ok1 := asInt64(xs[2])
	ms, ok2 := asInt64(xs[3])
	if !ok1 || !ok2 || r < 0 {
		return 0, 0, true, unexpected("acquire.lua", v)
	}
	return int(r), time.Duration(max(ms, 1)) * time.Millisecond, true, nil
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
	_, err := s.run(ctx, "wait-leave", w.shard, scriptLeave, w.keys, s.now(), w.ticket)
	return err
}

// waited reports a finished wait to Hooks.OnWait and returns err.
func (s *Set) waited(ctx context.Context, w *waiter, start time.Time, admitted bool, err error) error {
	if s.hooks.OnWait != nil {
		shard := -1
		if w != nil {
			shard = w.shard
		}
		s.hooks.OnWait(ctx, WaitInfo{Set: s.name, Shard: shard, Waited: time.Since(start), Admitted: admitted, Err: err})
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
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "BUSY"} {
		if strings.HasPrefix(re.Error(), p) {
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
