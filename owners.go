package expset

import (
	"context"
	"strconv"
	"time"
)

// maxOwnerConcurrency is the highest cap WithOwnerConcurrency takes.
const maxOwnerConcurrency = 1 << 20

// maxParked is the most events one Consume keeps set aside for owners at
// their cap; those beyond are released, uncharged, to come back by claim.
const maxParked = 100_000

// parkPoll is how often a Consume with events set aside asks again whether
// their owners have a free slot, in case a wake-up was lost or a dead
// consumer's slot lapsed (at once when a slot is freed: slotFreed).
const parkPoll = time.Second

// WithOwnerConcurrency caps the handler calls of one owner under way at
// once at n across every consumer of the group, in every process (default
// 0: no cap; 0 to 1<<20). The cap is kept in Redis: each running call holds
// a slot of its owner, taken by the call's begin and freed when the call
// ends (acknowledged, failed, buried or released) or, for a consumer that
// died, when another consumer claims its event, once its lease TTL has
// passed unrenewed. Every consumer of a group should use the same n: one
// without the option takes no slot.
//
// An event whose owner holds every slot is not begun and not charged an
// attempt: the consumer sets it aside and stays pending with it (up to
// 100,000 per Consume; past that they are released, uncharged), and sets
// aside behind it, unbegun, the events of its owner it reads next. While a
// read finds only such events, the next reads twice as many, up to 1,000
// a shard, to reach the events of owners with room: so an owner at its cap
// holds up no other owner's events beyond the reading of its own (a quiet
// owner's event behind a busy one's 10,000 waited 0.005x as long as
// without the cap; bench/README.md). As without the cap, a read takes up
// to WithReadBatch events past those it has call slots for. The
// events set aside are tried again in turn, one per owner each time
// (round-robin): at once when any consumer frees a slot of their shard
// (a wake-up, as for new events), and every second in case one was lost
// or a dead consumer's slot lapsed. The cap makes room only where it
// binds: with n at or above a consumer's WithConcurrency, one owner can
// fill its call slots, and new events are then started in stream order.
// Jobs of Set.Put have no owner and no cap, but for those put WithOwner,
// which take their owner's slots. With the option, handler calls
// run on goroutines of their own, as with WithConcurrency, even at its
// default 1.
//
// Cost: a capped call's begin takes its owner's slot in one more key per
// shard (expset:{name:S}:runo): one HSETNX for an owner's first slot,
// which the acknowledgement's batch frees, one HINCRBY each way for its
// others (servercost: 146k instructions an event against 124k uncapped,
// bench/README.md). A
// handled event whose call took its owner's last free slot is
// acknowledged at once, so that the slot frees at once for the owner's
// next events; the others wait with the acknowledgements batched (at most
// 100ms), so a slot another consumer filled meanwhile frees that much
// later. Each try of an event set aside is one round trip.
func WithOwnerConcurrency(n int) ConsumeOption {
	return consumeOption(func(c *consumeConfig) error {
		c.ownerCap = n
		return inRange("WithOwnerConcurrency", n, 0, maxOwnerConcurrency)
	})
}

// ownerSlot reports whether a call of d takes an owner slot
// (WithOwnerConcurrency).
func (c *consumer) ownerSlot(d delivery) bool { return c.cfg.ownerCap > 0 && eventOwner(d) != "" }

// eventOwner returns the owner of d's event: "" for a job of no owner,
// whose calls take no owner slot and which no owner pause holds.
func eventOwner(d delivery) string {
	o, _ := d.values["o"].(string)
	if isJobOwner(o) {
		return ""
	}
	return o
}

// parking holds the events a Consume WithOwnerConcurrency set aside because
// their owners were at their cap, per owner in arrival order, with the
// owners in turn order. It is Consume's goroutine's.
type parking struct {
	byOwner map[string][]delivery
	ring    []string        // owners with events set aside, next turn first
	ids     map[string]bool // "<shard> <ID>" of each event set aside
	at      time.Time       // when to try them again
}

func parkKey(d delivery) string { return strconv.Itoa(d.shard) + " " + d.id }

// park sets d, of owner, aside (front: at the head of owner's events, as
// the one tried first). It reports false when d cannot be kept (too many
// set aside) and must be released.
func (c *consumer) park(d delivery, owner string, front bool) bool {
	p := &c.parked
	k := parkKey(d)
	if p.ids[k] {
		return true // set aside already (claimed again): one is enough
	}
	if len(p.ids) >= maxParked {
		return false
	}
	if p.byOwner == nil {
		p.byOwner, p.ids = map[string][]delivery{}, map[string]bool{}
	}
	q, had := p.byOwner[owner]
	if !had {
		p.ring = append(p.ring, owner)
	}
	if front {
		q = append([]delivery{d}, q...)
	} else {
		q = append(q, d)
	}
	p.byOwner[owner], p.ids[k] = q, true
	if p.at.IsZero() {
		p.at = time.Now().Add(parkPoll)
	}
	return true
}

// unpark takes, when their time has come, the first event of each owner
// with events set aside (at most budget in all, < 0: no limit), in turn
// order, the owners served going to the back of the turn.
func (c *consumer) unpark(now time.Time, budget int) []delivery {
	p := &c.parked
	if len(p.ring) == 0 || now.Before(p.at) || budget == 0 {
		return nil
	}
	n := len(p.ring)
	if budget > 0 {
		n = min(n, budget)
	}
	var out []delivery
	for _, o := range p.ring[:n] {
		q := p.byOwner[o]
		d := q[0]
		d.parked = true
		out = append(out, d)
		delete(p.ids, parkKey(q[0]))
		if len(q) == 1 {
			delete(p.byOwner, o)
		} else {
			p.byOwner[o] = q[1:]
		}
	}
	served := p.ring[:n:n]
	rest := p.ring[n:]
	ring := make([]string, 0, len(p.ring))
	ring = append(ring, rest...)
	for _, o := range served {
		if _, left := p.byOwner[o]; left {
			ring = append(ring, o)
		}
	}
	p.ring = ring
	p.at = now.Add(parkPoll)
	return out
}

// unique drops from ds[from:] (claimed) the events this consumer holds
// already: set aside or read ahead (a claim took one again once it had
// waited a lease TTL unbegun: its turn comes from where it waits), or
// running (its lease lapsed while a renewal was late: the call goes on,
// and its next renewal takes the lease back), and all but the first of
// each event, so that this consumer never begins an event twice at once.
func (c *consumer) unique(ds []delivery, from int) []delivery {
	if len(ds) == from {
		return ds
	}
	seen := make(map[string]bool, len(ds))
	for _, d := range ds[:from] {
		seen[parkKey(d)] = true
	}
	for _, d := range c.ahead {
		seen[parkKey(d)] = true
	}
	if c.pool != nil {
		// Never a second call of an event this consumer runs, or has
		// handled and not yet acknowledged.
		c.pool.leases.running(seen)
	}
	out := ds[:from]
	for _, d := range ds[from:] {
		k := parkKey(d)
		if seen[k] || c.parked.ids[k] {
			continue
		}
		seen[k] = true
		out = append(out, d)
	}
	return out
}

// behindParked sets aside the events of ds whose owners have events set
// aside already, behind those (their turn comes after them, and a begin now
// would find the owner at its cap), and returns the rest. Those there is no
// room to set aside are released, uncharged.
func (c *consumer) behindParked(ctx context.Context, ds []delivery) []delivery {
	if len(c.parked.ring) == 0 || len(ds) == 0 {
		return ds
	}
	var out, over []delivery
	for _, d := range ds {
		owner := eventOwner(d)
		if _, waiting := c.parked.byOwner[owner]; owner == "" || !waiting {
			out = append(out, d)
		} else if !c.park(d, owner, false) {
			over = append(over, d)
		}
	}
	if len(over) > 0 {
		c.release(ctx, over, nil)
	}
	return out
}

// takeAhead takes up to n of the events read ahead, oldest first.
func (c *consumer) takeAhead(n int) []delivery {
	n = min(n, len(c.ahead))
	if n <= 0 {
		return nil
	}
	out := c.ahead[:n:n]
	c.ahead = c.ahead[n:]
	return out
}

// refused settles a begin that found d's owner at its cap, or d's group
// or owner paused: d is set aside (it stays first of its owner's, as it
// was the oldest) or, when too many are or for Reserve (which sets none
// aside), released.
func (c *consumer) refused(ctx context.Context, d delivery) error {
	if c.pool != nil && c.park(d, eventOwner(d), d.parked) {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	return c.releaseShard(wctx, d.shard, []string{d.id}, "", "")
}

// slotFreed makes the events set aside due now, and lets a consumer that
// found its group at its cap ask for slots again: one of this consumer's
// calls ended, or a wake-up said a slot was freed.
func (c *consumer) slotFreed() {
	if len(c.parked.ring) > 0 {
		c.parked.at = time.Time{}
	}
	c.paused = time.Time{}
	if c.gslots != nil {
		c.gslots.full = time.Time{}
	}
}

// releaseParked releases every event set aside or read ahead, uncharged
// (Consume stops).
func (c *consumer) releaseParked(ctx context.Context) {
	ds := c.ahead
	for _, q := range c.parked.byOwner {
		ds = append(ds, q...)
	}
	c.parked, c.ahead = parking{}, nil
	if len(ds) > 0 {
		c.release(ctx, ds, nil)
	}
}
