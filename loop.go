package expset

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// The background loops (Sweeper.Run, Set.Consume) share one resilience
// shape, built from the pieces in this file:
//
//   - loop runs rounds until ctx ends; a round's error either ends the loop
//     (cannotHeal: ctx ended, or misuse such as ErrInvalidArgument) or is reported
//     and the round retried after a capped exponential backoff with jitter.
//   - backoff is that delay, kept per loop or per shard, so one failing shard
//     backs off while the others carry on.
//   - Set.reportError sends each error survived to Hooks.OnError, or by
//     default to log/slog at warning level, rate-limited.
//   - shardErr tags an error with the shard it is confined to.

// Retry delays of the background loops: the first retry after a failure
// waits about retryMin, each further consecutive failure doubles it, up to
// retryMax. Each wait is drawn between half and all of that (jitter), so
// processes that failed together do not retry together.
const (
	retryMin = 100 * time.Millisecond
	retryMax = time.Second
)

// errorLogEvery is how often, at most, the default error report (no
// Hooks.OnError) logs one line for one op and shard of a set.
const errorLogEvery = 10 * time.Second

// backoff is the capped exponential backoff of one loop or one shard. The
// zero value uses retryMin, retryMax and math/rand/v2; it is not safe for
// simultaneous use.
type backoff struct {
	min, max time.Duration
	// jitter returns a duration in [0, d]; nil draws it from math/rand/v2.
	jitter func(d time.Duration) time.Duration
	fails  int
}

// fail counts one more consecutive failure and returns how long to wait
// before the next try: between half and all of min*2^(fails-1), capped at
// max.
func (b *backoff) fail() time.Duration {
	lo, hi := b.min, b.max
	if lo <= 0 {
		lo = retryMin
	}
	if hi <= 0 {
		hi = retryMax
	}
	d := lo
	for i := 0; i < b.fails && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	b.fails++
	j := b.jitter
	if j == nil {
		j = func(d time.Duration) time.Duration { return rand.N(d + 1) }
	}
	return d/2 + min(max(j(d/2), 0), d/2)
}

// ok resets the backoff after a success.
func (b *backoff) ok() { b.fails = 0 }

// failing reports whether the last try failed.
func (b *backoff) failing() bool { return b.fails > 0 }

// cannotHeal reports whether err, returned by a loop's round, must end the
// loop: ctx ended (then the loop returns nil), or misuse that no retry can
// mend (a set without events or index, an invalid option, name or consumer,
// a configuration mismatch). Anything else (connection refused, timeouts,
// LOADING, failover, MOVED, TRYAGAIN, CLUSTERDOWN, NOGROUP, WRONGTYPE,
// CROSSSLOT, unexpected replies from a key written by something else) may
// heal: it is reported and retried.
func cannotHeal(ctx context.Context, err error) bool {
	return ctx.Err() != nil || misuse(err)
}

// misuse reports whether err is a caller's mistake that retrying cannot mend.
func misuse(err error) bool {
	for _, m := range []error{ErrInvalidArgument, ErrConfigMismatch} {
		if errors.Is(err, m) {
			return true
		}
	}
	return false
}

// shardError is an error confined to one shard.
type shardError struct {
	shard int
	err   error
}

func (e *shardError) Error() string { return e.err.Error() }
func (e *shardError) Unwrap() error { return e.err }

// shardErr tags err (nil stays nil) with shard i, for reportError and loop.
func shardErr(i int, err error) error {
	if err == nil {
		return nil
	}
	return &shardError{shard: i, err: err}
}

// errShard returns the shard err is tagged with, or -1.
func errShard(err error) int {
	var se *shardError
	if errors.As(err, &se) {
		return se.shard
	}
	return -1
}

// errLoopDone is what a loop's round returns when the loop's work is done.
var errLoopDone = errors.New("expset: loop done")

// loop is the shape of a background loop: it calls round at once, then
// again each time the wait round returned has passed or a wake-up comes on
// wake (a nil wake never comes), until ctx ends (it
// returns nil). An error from round that cannot heal (cannotHeal) is
// returned; any other is reported (Set.reportError, as op, with the shard
// shardErr tagged it with) and round is called again after a backoff that
// grows with consecutive failures and resets on success. It starts no
// goroutine. round returns errLoopDone to end the loop (loop returns nil).
func (s *Set) loop(ctx context.Context, op string, wake <-chan struct{}, round func() (time.Duration, error)) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var bo backoff
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-wake:
			if bo.failing() {
				// Backing off: a wake-up does not cut the wait short.
				select {
				case <-ctx.Done():
					return nil
				case <-timer.C:
				}
			}
		}
		wait, err := round()
		switch {
		case err == nil:
			bo.ok()
		case err == errLoopDone:
			return nil
		case ctx.Err() != nil:
			return nil
		case misuse(err):
			return err
		default:
			wait = bo.fail()
			s.reportError(ctx, op, errShard(err), err, wait)
		}
		timer.Reset(wait)
	}
}

// reportError reports an error a background loop survived: to
// Hooks.OnError when set (every error), else to slog.Default() at warning
// level, at most one line per op and shard every errorLogEvery, with the
// count of the errors not logged since. Nothing is reported once ctx has
// ended: errors then come from the shutdown itself.
func (s *Set) reportError(ctx context.Context, op string, shard int, err error, retry time.Duration) {
	if err == nil || ctx.Err() != nil {
		return
	}
	if h := s.hooks.OnError; h != nil {
		h(ctx, CallInfo{Set: s.name, Op: op, Shard: shard, Err: err}, retry)
		return
	}
	s.errLog.log(ctx, s.name, op, shard, err, retry)
}

// errorLog rate-limits the default error report. The zero value logs to
// slog.Default() at most once every errorLogEvery per op and shard; it is
// safe for simultaneous use.
type errorLog struct {
	logger *slog.Logger     // nil: slog.Default() at the time of the call
	every  time.Duration    // 0: errorLogEvery
	now    func() time.Time // nil: time.Now
	mu     sync.Mutex
	seen   map[errorKey]*errorSeen // per op and shard
}

type errorKey struct {
	op    string
	shard int
}

type errorSeen struct {
	logged     time.Time // when the last line was logged
	suppressed int       // errors not logged since
}

func (l *errorLog) log(ctx context.Context, set, op string, shard int, err error, retry time.Duration) {
	now := time.Now
	if l.now != nil {
		now = l.now
	}
	every := errorLogEvery
	if l.every > 0 {
		every = l.every
	}
	t := now()
	l.mu.Lock()
	if l.seen == nil {
		l.seen = map[errorKey]*errorSeen{}
	}
	k := errorKey{op, shard}
	st := l.seen[k]
	if st == nil {
		st = &errorSeen{}
		l.seen[k] = st
	} else if t.Sub(st.logged) < every {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := st.suppressed
	st.logged, st.suppressed = t, 0
	l.mu.Unlock()

	logger := l.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(ctx, slog.LevelWarn, "expset: retrying after error",
		slog.String("set", set), slog.String("op", op), slog.Int("shard", shard),
		slog.String("err", err.Error()), slog.Duration("retry", retry),
		slog.Int("suppressed", suppressed))
}
