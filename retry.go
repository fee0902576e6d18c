package expset

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/expset/expset/internal/store"
)

// Retry delays of Set.Consume: when a handler call fails, its event is
// delivered again after a delay (WithRetryBackoff, or the handler's own
// through RetryAfter), or dead-lettered at once (Bury).
//
// While it waits, the event stays pending in the group, held by the
// consumer named retryHolder (never a real consumer: Consume refuses
// the name), with an idle time that makes it claimable once the
// delay has passed: the lease TTL minus the delay. A delay of at least the
// lease TTL cannot be written as an idle time: the event is held with idle
// time 0 and its attempts field keeps the time it may be delivered again
// (not before), which claim.lua respects by holding it again until then.
// So every consumer's claim finds a retry when it is due, and an operator
// counts scheduled retries by the holder's pending entries (GroupInfo).

// Retry backoff defaults (WithRetryBackoff).
const (
	defaultRetryFirst = time.Second
	defaultRetryLimit = 5 * time.Minute
	maxRetryLimit     = 24 * time.Hour
)

// retryHolder is the consumer that holds events waiting for their retry
// delay (store.RetryHolder).
const retryHolder = store.RetryHolder

// maxRetryDues is the most retry due times a consumer remembers per shard
// to claim them on time; past that, its regular claims find the others (at
// most 5s late).
const maxRetryDues = 1000

// WithRetryBackoff sets how long an event whose handler call failed waits
// before it is delivered again (to any consumer of the group): first after
// a failed first attempt, twice that after the second, and so on, at most
// limit. Each delay is drawn between three quarters and all of that (jitter),
// so events that failed together do not come back together. A handler sets
// one call's delay itself with RetryAfter, or dead-letters its event at
// once with Bury. The default is WithRetryBackoff(time.Second, 5*time.Minute):
// 1s, 2s, 4s, ... up to 5m. first 0 retries at once, whatever limit; first
// and limit range over 0 to 24h with limit at least first, so a negative
// value, or limit below first, is an error. The lease TTL (WithLeaseTTL)
// no longer sets when a failed event returns: only a consumer that dies
// mid-call leaves its event to come back after the lease TTL.
func WithRetryBackoff(first, limit time.Duration) DeliveryOption {
	return deliveryOption(func(c *consumeConfig) error {
		c.retryFirst, c.retryLimit = first, limit
		if err := inRange("WithRetryBackoff first", first, 0, maxRetryLimit); err != nil {
			return err
		}
		if err := inRange("WithRetryBackoff limit", limit, 0, maxRetryLimit); err != nil {
			return err
		}
		if limit < first {
			return fmt.Errorf("%w: WithRetryBackoff: limit %v is below first %v: give a limit of at least first", ErrInvalidArgument, limit, first)
		}
		return nil
	})
}

// handlerVerdict is the error RetryAfter and Bury return: the handler's
// error, with what Consume should do with the event.
type handlerVerdict struct {
	err   error
	after time.Duration // RetryAfter: the delay, at least 0
	bury  bool          // Bury
}

func (v *handlerVerdict) Error() string {
	switch {
	case v.err != nil:
		return v.err.Error()
	case v.bury:
		return "expset: buried by its handler"
	}
	return fmt.Sprintf("expset: retry after %v", v.after)
}

func (v *handlerVerdict) Unwrap() error { return v.err }

// RetryAfter returns err (errors.Is and errors.As still see it, and
// Error() is its text) marked so that Set.Consume, when a handler returns
// it, delivers the event again after d instead of after the delay
// WithRetryBackoff gives it: beanstalkd's release with a delay. d may be
// shorter or longer than the lease TTL; d <= 0 retries at once, and d
// over 100 years counts as 100 years. The call
// still counts as a failed attempt: on the last one (WithMaxAttempts) the
// event is dead-lettered as usual. RetryAfter(nil, d) is a failure too,
// whose text is "expset: retry after d"; it is never taken for success.
// When errors of RetryAfter and Bury wrap each other, the outermost wins.
func RetryAfter(err error, d time.Duration) error {
	return &handlerVerdict{err: err, after: max(d, 0)}
}

// Bury returns err (errors.Is and errors.As still see it, and Error() is
// its text) marked so that Set.Consume, when a handler returns it, moves
// the event to the dead-letter stream at once, with err's text and the
// attempts used, whatever attempts are left: for an event no retry can
// mend, such as a malformed payload. Bury(nil) buries too, with the text
// "expset: buried by its handler". Kick returns a buried event to its
// group.
func Bury(err error) error {
	return &handlerVerdict{err: err, bury: true}
}

// verdictOf returns the outermost RetryAfter or Bury in err's chain, or nil.
func verdictOf(err error) *handlerVerdict {
	var v *handlerVerdict
	if errors.As(err, &v) {
		return v
	}
	return nil
}

// handlerBuries reports whether err is, or wraps outermost, a Bury.
func handlerBuries(err error) bool {
	v := verdictOf(err)
	return v != nil && v.bury
}

// retryDelay returns how long the event of a failed handler call waits
// before it is delivered again: the handler's RetryAfter, else the
// backoff's delay for attempt (1 for the first call).
func (c *consumer) retryDelay(herr error, attempt int) time.Duration {
	if v := verdictOf(herr); v != nil {
		return v.after
	}
	return backoffDelay(c.cfg.retryFirst, c.cfg.retryLimit, attempt, func(n time.Duration) time.Duration {
		return rand.N(n + 1)
	})
}

// backoffDelay returns first*2^(attempt-1), capped at limit, less a jitter
// in [0, a quarter of it] (jitter(n) returns a duration in [0, n]).
func backoffDelay(first, limit time.Duration, attempt int, jitter func(time.Duration) time.Duration) time.Duration {
	if first <= 0 {
		return 0
	}
	d := first
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d - min(max(jitter(d/4), 0), d/4)
}

// retry schedules the next handler call of event id of shard, whose call
// with token failed, after delay (retry.lua), and notes when it is due for
// the set's consumers of the group in this process (retryBoard). It
// reports false when the call's lease is no longer its own (nothing
// changed). It touches nothing of the consumer (a Consume's calls run it on
// their own goroutines).
func (c *consumer) retry(ctx context.Context, shard int, id, token string, delay time.Duration) (bool, error) {
	delay = min(delay, maxTTL)
	if r := delay.Truncate(time.Millisecond); r < delay {
		delay = r + time.Millisecond // never early
	}
	ok, err := c.set.st.Retry(ctx, c.args(), shard, store.Lease{ID: id, Token: token}, delay)
	if !ok || err != nil {
		return false, err
	}
	c.set.retryNotes.note(c.group, retryNote{shard, time.Now().Add(delay)})
	return true, nil
}

// retryNote is a retry scheduled on shard, due at due.
type retryNote struct {
	shard int
	due   time.Time
}

// takeRetries makes the consumer claim the retries noted since its last
// round when they are due. Only the goroutine that runs the consumer's
// rounds calls it.
func (c *consumer) takeRetries() {
	c.retryMu.Lock()
	notes := c.retryNotes
	c.retryNotes = nil
	c.retryMu.Unlock()
	for _, n := range notes {
		sh := &c.shards[n.shard]
		if !sh.active || n.due.Before(sh.nextClaim) {
			sh.nextClaim = n.due
		}
		sh.active = true
		if c.retries == nil {
			c.retries = make([]retryDues, len(c.shards))
		}
		r := &c.retries[n.shard]
		if len(r.dues) < maxRetryDues {
			k, _ := slices.BinarySearchFunc(r.dues, n.due, time.Time.Compare)
			r.dues = slices.Insert(r.dues, k, n.due)
		}
	}
}

// retryBoard passes the retries a process schedules to every consumer of
// the group in that process (Consume's, and Reserve's between and during
// calls), so that whichever reads next claims each when it is due: the
// consumer whose call failed may be gone by then, or busy. A consumer that
// joins later (a Reserve after a pause) is given the retries of its group
// not yet due. The zero value is ready to use; it is safe for simultaneous
// use.
type retryBoard struct {
	mu        sync.Mutex
	consumers map[*consumer]bool
	kept      map[string][]retryNote // per group: retries noted, for consumers that join later
}

// join makes c receive the retries of its group, starting with those kept;
// leave stops it.
func (b *retryBoard) join(c *consumer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.consumers == nil {
		b.consumers = map[*consumer]bool{}
	}
	b.consumers[c] = true
	kept := b.prune(c.group)
	c.retryMu.Lock()
	c.retryNotes = append(c.retryNotes, kept...)
	c.retryMu.Unlock()
}

// prune drops the retries of group that were due a while ago (b.mu held)
// and returns the rest.
func (b *retryBoard) prune(group string) []retryNote {
	old := time.Now().Add(-time.Second)
	kept := b.kept[group][:0]
	for _, n := range b.kept[group] {
		if n.due.After(old) {
			kept = append(kept, n)
		}
	}
	if len(kept) == 0 {
		delete(b.kept, group)
		return nil
	}
	b.kept[group] = kept
	return kept
}

func (b *retryBoard) leave(c *consumer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.consumers, c)
}

// note gives n, a retry of group, to each of the group's consumers, and
// wakes them.
func (b *retryBoard) note(group string, n retryNote) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kept == nil {
		b.kept = map[string][]retryNote{}
	}
	if kept := b.prune(group); len(kept) < maxRetryDues {
		b.kept[group] = append(kept, n)
	}
	for c := range b.consumers {
		if c.group != group {
			continue
		}
		c.retryMu.Lock()
		c.retryNotes = append(c.retryNotes, n)
		c.retryMu.Unlock()
		if c.wk != nil {
			c.wk.poke()
		}
	}
}

// retryDues is what a consumer knows of the retries it scheduled on one
// shard.
type retryDues struct {
	dues     []time.Time // when each is due, in order
	scanFrom time.Time   // when the claim scan under way began at the pending list's start
}

// claimScan notes a claim of shard sent at at from cursor, and, once the
// scan is over (next is "0-0"), returns when the next claim must run:
// regular, or earlier when a retry this consumer scheduled is due before
// (the scan found those due when it began).
func (c *consumer) claimScan(shard int, cursor, next string, at, regular time.Time) time.Time {
	if c.retries == nil {
		return regular
	}
	r := &c.retries[shard]
	if cursor == "0-0" {
		r.scanFrom = at
	}
	if next != "0-0" {
		return regular
	}
	k := 0
	for k < len(r.dues) && !r.dues[k].After(r.scanFrom) {
		k++
	}
	r.dues = r.dues[k:]
	if len(r.dues) > 0 && r.dues[0].Before(regular) {
		return r.dues[0]
	}
	return regular
}

// retryCount asks for the events of group on shard waiting for their
// retry delay, to be added to n (countRetrying).
type retryCount struct {
	shard int
	group string
	n     *int64
}

// countRetrying adds to each query's counter the entries its group holds
// pending on its shard's stream under retryHolder (store.Retrying: one
// round trip, none for no query). A stream or group deleted meanwhile
// counts 0.
func (s *Set) countRetrying(ctx context.Context, qs []retryCount) error {
	gs := make([]store.GroupShard, len(qs))
	for i, q := range qs {
		gs[i] = store.GroupShard{Group: q.group, Shard: q.shard}
	}
	ns, err := s.st.Retrying(ctx, gs)
	if err != nil {
		return err
	}
	for i, n := range ns {
		*qs[i].n += n
	}
	return nil
}
