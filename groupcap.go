package expset

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/store"
)

// maxGroupConcurrency is the highest cap WithGroupConcurrency takes.
const maxGroupConcurrency = 1 << 20

// groupWait is how long a Consume that found its group at its cap waits
// before asking for a call slot again when no wake-up says one was freed
// (one was lost, or a dead consumer's slot lapsed).
const groupWait = time.Second

// WithGroupConcurrency caps the handler calls of the consumer group under
// way at once at n, over every consumer of the group in every process and
// every shard (default 0: no cap; 0 to 1<<20). It combines with
// WithOwnerConcurrency ("at most 5 calls to the payment provider, at most
// 1 per merchant") and with each Consume's WithConcurrency. Every consumer
// of the group should use the same n: one without the option takes no
// slot (nor does Reserve, which does not take it), and one with another n
// enforces its own.
//
// The cap is kept in Redis, in one sorted set of the group's call slots
// (expset:{name}:gslots:<group>, on one node of a Redis Cluster). Before it
// begins calls, a consumer takes a slot for each (one script call for all
// it begins at once); a slot is freed as soon as its handler returns, and
// the events it could take no slot for wait in the consumer, read and
// charged no attempt, until a slot is freed: at once when any consumer
// frees one of a group at its cap (a wake-up on
// expset:{name}:gslots:<group>:wake), and every second in case the wake-up
// was lost or a dead consumer's slot lapsed. A slot has a lease like its
// call's event (WithLeaseTTL), renewed with it; the slot of a consumer
// that died lapses once its lease TTL has passed unrenewed. A call whose
// slot could not be renewed in time and went to another call ends as a
// lost lease (context.Cause ErrLeaseLost), so that the cap holds even
// across a consumer's stall.
//
// Cost: one more script call a round of begins (on the cap's node), one
// a round of renewals and one a batch of ended calls.
func WithGroupConcurrency(n int) ConsumeOption {
	return consumeOption(func(c *consumeConfig) error {
		c.groupCap = n
		return inRange("WithGroupConcurrency", n, 0, maxGroupConcurrency)
	})
}

// groupSlots is a Consume's side of its group's call slots
// (WithGroupConcurrency). It is Consume's goroutine's.
type groupSlots struct {
	st   store.GroupSlots
	full time.Time // when a take found the group at its cap (zero: not so, or a slot was freed since)
}

// newGroupSlots returns the call slots of c's group, or nil without a cap.
func (c *consumer) newGroupSlots() *groupSlots {
	if c.cfg.groupCap == 0 {
		return nil
	}
	return &groupSlots{st: c.set.st.NewGroupSlots(c.group, c.cfg.groupCap, c.cfg.leaseTTL.Milliseconds())}
}

// listenFreed subscribes to the wake-ups of the group's slots freed, which
// make the consumer ask for slots again; the function it returns ends the
// subscription.
func (c *consumer) listenFreed() func() {
	w := c.wk
	sub := c.set.subscribe(subscriber{
		op: "subscribe", shard: -1, channels: []string{c.gslots.st.Wake()}, retry: true,
		message:      func(*redis.Message) { w.wake(nil, wakeSlot) },
		resubscribed: func() { w.wake(nil, wakeLost) },
		quiet:        loopPing,
	})
	return sub.close
}

// groupFull reports whether the group was found at its cap lately, with
// no slot freed since: no new call can be begun.
func (c *consumer) groupFull(now time.Time) bool {
	g := c.gslots
	return g != nil && !g.full.IsZero() && now.Sub(g.full) < groupWait
}

// grant takes a call slot of the group for each of todo, in order, as
// many as the cap leaves room for, and returns those that got one, the
// slot's token in slot (their calls' tokens). The others go back to the
// front of the events read ahead, to be begun first once a slot frees.
func (c *consumer) grant(ctx context.Context, todo []delivery) []delivery {
	g := c.gslots
	if g == nil || len(todo) == 0 {
		return todo
	}
	tokens := make([]string, len(todo))
	start := c.set.clockNow()
	for i, d := range todo {
		tokens[i] = callToken(c.name, start, c.cfg.leaseTTL, c.ownerSlot(d))
	}
	n, err := c.set.st.GroupTake(ctx, g.st, tokens)
	if err != nil {
		// The take may have run: free what it may have taken.
		c.pool.leases.freeSlots(tokens...)
		c.set.reportError(ctx, "consume", -1, err, groupWait)
	}
	for i := range todo[:n] {
		todo[i].slot = tokens[i]
	}
	if n < len(todo) {
		g.full = time.Now()
		c.ahead = append(append(make([]delivery, 0, len(todo)-n+len(c.ahead)), todo[n:]...), c.ahead...)
	}
	return todo[:n]
}

// slotsOf returns the group slots that todo hold (grant).
func slotsOf(todo []delivery) map[string]bool {
	var slots map[string]bool
	for _, d := range todo {
		if d.slot != "" {
			if slots == nil {
				slots = map[string]bool{}
			}
			slots[d.slot] = true
		}
	}
	return slots
}

// slotSend is what one send of the lease keeper does with the group call
// slots (WithGroupConcurrency): it renews the slots of the calls whose
// leases it renews (renews, each of the calls of renewing at the same
// index) and frees the slots of the calls that ended (frees).
type slotSend struct {
	renews   []*store.Call
	renewing [][]*leaseCall
	frees    []*store.Call
}

// calls returns the script calls of s.
func (s slotSend) calls() []*store.Call {
	return append(s.renews[:len(s.renews):len(s.renews)], s.frees...)
}

// slotCalls returns the calls renewing the group call slots of the calls
// of due and freeing the slots freed (none without the cap), at most
// MaxBatch tokens a call.
func (c *consumer) slotCalls(due store.Batches[int, *leaseCall], freed []string) slotSend {
	var s slotSend
	g := c.gslots
	if g == nil {
		return s
	}
	var renewing []*leaseCall
	for _, lcs := range due.Items {
		for _, lc := range lcs {
			if lc.slot {
				renewing = append(renewing, lc)
			}
		}
	}
	for len(renewing) > 0 {
		part := renewing[:min(len(renewing), store.MaxBatch)]
		renewing = renewing[len(part):]
		tokens := make([]string, len(part))
		for i, lc := range part {
			tokens[i] = lc.token
		}
		s.renews = append(s.renews, c.set.st.GroupRenewCall(g.st, tokens))
		s.renewing = append(s.renewing, part)
	}
	for len(freed) > 0 {
		part := freed[:min(len(freed), store.MaxBatch)]
		freed = freed[len(part):]
		s.frees = append(s.frees, c.set.st.GroupFreeCall(g.st, part))
	}
	return s
}

// slotsSent settles the slot calls of a send at now (k.mu held): a call
// whose slot is gone (it lapsed and went to another call) loses its lease,
// so that the cap holds; one whose renewal failed for a Redis error is
// renewed again soon. Errors are reported: a slot that was not freed
// lapses with its lease (the retry reported).
func (k *leaseKeeper) slotsSent(s slotSend, now time.Time) {
	c := k.c
	again := min(c.beat, time.Second)
	for j, r := range s.renews {
		held, err := store.ReadGroupRenew(r, len(s.renewing[j]))
		for i, lc := range s.renewing[j] {
			switch {
			case err != nil:
				lc.next = now.Add(again)
			case !held[i] && !lc.gone:
				lc.gone = true
				lc.lost(ErrLeaseLost)
			}
		}
		if err != nil {
			c.set.reportError(k.ctx, "consume", -1, err, again)
		}
	}
	for _, f := range s.frees {
		if _, err := store.ReadGroupFree(f); err != nil {
			c.set.reportError(k.ctx, "consume", -1, err, c.cfg.leaseTTL)
		}
	}
}
