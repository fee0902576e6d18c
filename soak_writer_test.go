package expset

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The soak's writers (TestSoak, soak_test.go): each keeps, per member, the
// incarnations it saw and what its calls answered, for the checks that
// follow the soak.

// incarnation is one life of a member, as the soak's writers saw it: from
// the call that gave it a slot (or added it) to its removal by a live
// Release/Remove, or its expiry. A member ID re-added after it expired
// starts a new incarnation; one re-added while live keeps its incarnation
// with the new deadline. Only the goroutine that created an incarnation
// touches it while the writers run.
type incarnation struct {
	owner, member string
	quota         bool      // acquired through the quota (else added)
	start, end    time.Time // the call that created it: sent, answered
	now           int64     // that call's "now" in ms: its deadline minus its ttl
	first         int64     // the deadline it got then, ms
	deadline      int64     // its deadline now, ms
	count         int       // quota: Decision.Count of the admission
	extends       []extension
	released      time.Time // when the Release/Remove that removed it live was sent
	removed       bool      // removed live: no event
}

type extension struct {
	end      time.Time // the Extend (or live re-add) was answered
	deadline int64
}

// deadlineAt is a lower bound of inc's deadline when a call sent at t ran:
// the latest deadline set by a call answered before t. (Quota members are
// only ever extended, so their deadlines only grow.)
func (inc *incarnation) deadlineAt(t time.Time) int64 {
	d := inc.first
	for _, e := range inc.extends {
		if e.end.Before(t) {
			d = max(d, e.deadline)
		}
	}
	return d
}

// soakOps counts what the writers did.
type soakOps struct {
	acquired, denied, retriedHeld, retriedExpired, released, releaseExpired int
	extended, extendExpired, added, readdedLive, readdedExpired             int
	removed, removeExpired, counted                                         int
}

func (o *soakOps) add(p soakOps) {
	o.acquired += p.acquired
	o.denied += p.denied
	o.retriedHeld += p.retriedHeld
	o.retriedExpired += p.retriedExpired
	o.released += p.released
	o.releaseExpired += p.releaseExpired
	o.extended += p.extended
	o.extendExpired += p.extendExpired
	o.added += p.added
	o.readdedLive += p.readdedLive
	o.readdedExpired += p.readdedExpired
	o.removed += p.removed
	o.removeExpired += p.removeExpired
	o.counted += p.counted
}

func (o soakOps) total() int {
	return o.acquired + o.denied + o.retriedHeld + o.retriedExpired + o.released + o.releaseExpired +
		o.extended + o.extendExpired + o.added + o.readdedLive + o.readdedExpired + o.removed + o.removeExpired + o.counted
}

// soakWriter is one writer goroutine and the incarnations it created.
type soakWriter struct {
	id    int
	quota bool
	q     *Quota
	s     *Set
	rng   *rand.Rand
	n     int
	all   []*incarnation
	held  []*incarnation // not removed, not known to have expired
	ops   soakOps
}

const soakLimit = 3

// soakTTL is a ttl of 20 to 300ms: members expire all the time.
func (w *soakWriter) ttl() time.Duration {
	return time.Duration(20+w.rng.IntN(281)) * time.Millisecond
}

func (w *soakWriter) pickHeld() (int, *incarnation) {
	i := w.rng.IntN(len(w.held))
	return i, w.held[i]
}

func (w *soakWriter) drop(i int) {
	w.held[i] = w.held[len(w.held)-1]
	w.held = w.held[:len(w.held)-1]
}

// begin records a new incarnation created by a call sent at start.
func (w *soakWriter) begin(owner, member string, start time.Time, deadline time.Time, ttl time.Duration) *incarnation {
	d := deadline.UnixMilli()
	inc := &incarnation{owner: owner, member: member, quota: w.quota, start: start, end: time.Now(),
		now: d - ttl.Milliseconds(), first: d, deadline: d}
	w.all = append(w.all, inc)
	w.held = append(w.held, inc)
	return inc
}

// step does one random operation; an error ends the writer.
func (w *soakWriter) step(ctx context.Context, owners []string) error {
	r := w.rng.IntN(100)
	if len(w.held) == 0 || r < 45 {
		owner := owners[w.rng.IntN(len(owners))]
		w.n++
		if w.quota {
			return w.acquire(ctx, owner, fmt.Sprintf("q%d-%d", w.id, w.n), nil)
		}
		return w.add(ctx, owner, fmt.Sprintf("a%d-%d", w.id, w.n), nil)
	}
	i, inc := w.pickHeld()
	switch {
	case r < 55:
		if w.quota {
			return w.acquire(ctx, inc.owner, inc.member, inc)
		}
		return w.add(ctx, inc.owner, inc.member, inc)
	case r < 75:
		return w.remove(ctx, i, inc)
	case r < 90:
		return w.extend(ctx, i, inc)
	default:
		n, err := w.s.Count(ctx, inc.owner)
		if err != nil {
			return err
		}
		if w.quota && n > soakLimit {
			return fmt.Errorf("over-admission: Count(%s) = %d > limit %d", inc.owner, n, soakLimit)
		}
		w.ops.counted++
		return nil
	}
}

// acquire acquires member of owner; old is its current incarnation for a
// retry, nil for a new member.
func (w *soakWriter) acquire(ctx context.Context, owner, member string, old *incarnation) error {
	ttl := w.ttl()
	start := time.Now()
	d, err := w.q.Acquire(ctx, owner, member, ttl, WithPayload([]byte(member)))
	if err != nil {
		return err
	}
	if d.Count > soakLimit || d.Limit != soakLimit {
		return fmt.Errorf("over-admission: Acquire(%s, %s) = %+v", owner, member, d)
	}
	if old != nil {
		if d.Existing {
			if d.Deadline.UnixMilli() != old.deadline {
				return fmt.Errorf("retry of held %s/%s: deadline %d, want %d kept", owner, member, d.Deadline.UnixMilli(), old.deadline)
			}
			w.ops.retriedHeld++
			return nil
		}
		// Not held any more: it expired (its event is due), and the retry
		// is a new acquisition.
		w.drop(slices.Index(w.held, old))
		w.ops.retriedExpired++
	} else if d.Existing {
		return fmt.Errorf("Acquire of new member %s/%s: Existing %+v", owner, member, d)
	}
	if !d.Allowed {
		if d.Count != soakLimit || d.RetryAfter <= 0 {
			return fmt.Errorf("denial %+v: want Count = limit and a RetryAfter", d)
		}
		w.ops.denied++
		return nil
	}
	inc := w.begin(owner, member, start, d.Deadline, ttl)
	inc.count = d.Count
	if old != nil && old.deadline > inc.now {
		return fmt.Errorf("retry of %s/%s not Existing at %d, but its deadline %d had not passed", owner, member, inc.now, old.deadline)
	}
	w.ops.acquired++
	return nil
}

// add adds member to owner; old is its current incarnation for a re-add.
func (w *soakWriter) add(ctx context.Context, owner, member string, old *incarnation) error {
	ttl := w.ttl()
	start := time.Now()
	d, err := w.s.Add(ctx, owner, member, ttl, WithPayload([]byte(member)))
	if err != nil {
		return err
	}
	now := d.UnixMilli() - ttl.Milliseconds()
	if old != nil && old.deadline > now {
		// Still live: the same incarnation, with the new deadline (which
		// may be earlier).
		old.deadline = d.UnixMilli()
		old.extends = append(old.extends, extension{end: time.Now(), deadline: old.deadline})
		w.ops.readdedLive++
		return nil
	}
	if old != nil {
		w.drop(slices.Index(w.held, old))
		w.ops.readdedExpired++
	} else {
		w.ops.added++
	}
	w.begin(owner, member, start, d, ttl)
	return nil
}

func (w *soakWriter) remove(ctx context.Context, i int, inc *incarnation) error {
	start := time.Now()
	var live bool
	if w.quota {
		ok, err := w.q.Release(ctx, inc.owner, inc.member)
		if err != nil {
			return err
		}
		live = ok
	} else {
		n, err := w.s.Remove(ctx, inc.owner, inc.member)
		if err != nil {
			return err
		}
		live = n == 1
	}
	w.drop(i)
	switch {
	case live && w.quota:
		w.ops.released++
	case live:
		w.ops.removed++
	case w.quota: // expired before the call: its event is due
		w.ops.releaseExpired++
	default:
		w.ops.removeExpired++
	}
	if live {
		inc.removed, inc.released = true, start
	}
	return nil
}

func (w *soakWriter) extend(ctx context.Context, i int, inc *incarnation) error {
	d, err := w.s.Extend(ctx, inc.owner, inc.member, w.ttl())
	switch {
	case errors.Is(err, ErrNotFound):
		w.drop(i)
		w.ops.extendExpired++
		return nil
	case err != nil:
		return err
	}
	if d.UnixMilli() < inc.deadline {
		return fmt.Errorf("Extend of %s/%s moved its deadline from %d to %d", inc.owner, inc.member, inc.deadline, d.UnixMilli())
	}
	inc.deadline = d.UnixMilli()
	inc.extends = append(inc.extends, extension{end: time.Now(), deadline: inc.deadline})
	w.ops.extended++
	return nil
}
