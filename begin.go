package expset

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/store"
)

// beginAll begins a handler call of each of todo (claimed, or set aside
// before), in one begins.lua call per shard, all in one pipeline, and
// returns the calls begun. The events not meant for the group are
// acknowledged, those that cannot be read as events buried, and those
// whose owners are at their cap set aside (refused); those another
// consumer holds are dropped. The group call slots of todo (grant) that
// no call begun holds are freed.
func (c *consumer) beginAll(ctx context.Context, todo []delivery) (begun []takenCall) {
	if slots := slotsOf(todo); slots != nil {
		defer func() {
			for _, tc := range begun {
				delete(slots, tc.token)
			}
			for tok := range slots {
				c.pool.leases.freeSlots(tok)
			}
		}()
	}
	bs := c.beginBatches(ctx, todo)
	if len(bs.Items) == 0 {
		return nil
	}
	calls := make([]*store.Call, len(bs.Items))
	for k, items := range bs.Items {
		begins := make([]store.BeginItem, len(items))
		for j, it := range items {
			begins[j] = store.BeginItem{ID: it.d.id, Token: it.token, Owner: eventOwner(it.d), Fresh: it.fresh}
		}
		calls[k] = c.set.st.BeginsCall(c.args(), bs.Keys[k], begins)
	}
	// Not cut short by ctx: an attempt counted is an attempt handed out.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	leased := time.Now()
	c.set.st.RunPipelined(wctx, calls)
	for k, b := range calls {
		replies, err := store.ReadBegins(b, len(bs.Items[k]))
		if err != nil {
			// Each may have counted: give that back (once, whatever ran).
			for _, it := range bs.Items[k] {
				_ = c.releaseShard(wctx, it.d.shard, []string{it.d.id}, it.d.id, it.token) // err is reported
			}
			c.fail(ctx, b.Shard, err)
			continue
		}
		for j, it := range bs.Items[k] {
			r := replies[j]
			switch {
			case r.Err != nil:
				c.fail(ctx, b.Shard, r.Err)
				continue
			case r.Attempt == store.BeginFull || r.Attempt == store.BeginPaused || r.Attempt == store.BeginOwnerPaused:
				if r.Attempt == store.BeginPaused {
					c.paused = time.Now()
				}
				if err := c.refused(ctx, it.d); err != nil {
					c.fail(ctx, it.d.shard, err)
				}
				continue
			case r.Attempt <= 0:
				continue // another consumer holds it, or a claim buries it
			}
			it.leased, it.full = leased, r.Full
			if !r.Taken {
				it.leased = it.d.at // the lease of the read or claim that took it runs on
			}
			it.e.Attempt = r.Attempt
			begun = append(begun, it)
			c.paused = time.Time{}
		}
	}
	return begun
}

// beginBatches groups the events of todo that a handler call can be made
// of by shard, in batches of at most maxBatch, each with a new call
// token (the group call slot's it holds, if any), and settles the others
// (unbegun). The fresh come first (each
// call counts them: begins.lua's ARGV[7]), begun without a look at the
// pending list: read or claimed by this consumer so lately that no other
// can have taken them (see fresh).
func (c *consumer) beginBatches(ctx context.Context, todo []delivery) store.Batches[int, takenCall] {
	var bs store.Batches[int, takenCall]
	now, start := time.Now(), c.set.clockNow()
	for _, fresh := range []bool{true, false} {
		for _, d := range todo {
			if c.fresh(d, now) != fresh {
				continue
			}
			e, ok := c.unbegun(ctx, d)
			if !ok {
				continue
			}
			tc := takenCall{d: d, e: e, token: d.slot, fresh: fresh, slot: d.slot != ""}
			if !tc.slot {
				tc.token = callToken(c.name, start, c.cfg.leaseTTL, c.ownerSlot(d))
			}
			tc.d.slot = "" // the call holds it: an event set aside or released later holds none
			bs.Add(d.shard, tc)
		}
	}
	return bs
}

// fresh reports whether begins.lua may begin d at now without a look at
// the pending list or the attempts field: d is a new event this consumer
// read less than half the time (a sixth of the lease TTL) under which the
// script keeps a consumer's own lease as it is, so no other consumer can
// have taken it (a claim needs it idle a whole lease TTL) and no call of
// it has begun, with room for the clocks of client and server to differ
// in rate. Set.Cancel of a job whose event was read and not begun leaves
// a mark that the fresh begin finds (cancel.lua).
func (c *consumer) fresh(d delivery, now time.Time) bool {
	return d.new && now.Sub(d.at) < c.cfg.leaseTTL/12
}

// unbegun settles d when no handler call can be made of it: an event not
// meant for the group (a dead letter of another, kicked back) is
// acknowledged, an entry that cannot be read as an event is buried. Else
// it returns the event.
func (c *consumer) unbegun(ctx context.Context, d delivery) (Expiry, bool) {
	if g, ok := d.values["g"].(string); ok && g != c.group {
		c.ackLater(d.shard, d.id, d.at)
		return Expiry{}, false
	}
	e, perr := parseExpiry(d.shard, redis.XMessage{ID: d.id, Values: d.values}, 0)
	if perr != nil {
		// Not an event at all: no handler call can mend it.
		buried, err := c.bury(ctx, d.shard, d.id, 0, perr.Error(), "")
		if buried {
			c.event(ctx, d.shard, 0, perr, true)
		}
		if err != nil {
			c.fail(ctx, d.shard, err)
		}
		return Expiry{}, false
	}
	return e, true
}

// ackLater acknowledges event id of shard, read at at and begun by no
// call, with the acknowledgements waiting: the lease keeper's, or for
// Reserve the buffer its next round sends.
func (c *consumer) ackLater(shard int, id string, at time.Time) {
	if c.pool != nil {
		c.pool.leases.ack(shard, id, "", at)
		return
	}
	c.addAck(shard, id, "", at)
}

// takenCall is an event whose handler call was begun (begins.lua).
type takenCall struct {
	d      delivery
	e      Expiry
	token  string
	leased time.Time // when its lease was taken (at the latest)
	full   bool      // its owner's slots were all held with its own (WithOwnerConcurrency)
	fresh  bool      // begun without a look at the pending list (beginBatches)
	slot   bool      // token is a group call slot's (WithGroupConcurrency)
}
