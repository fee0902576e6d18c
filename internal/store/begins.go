package store

import "slices"

// begins.go serves begins.lua and begin_fresh.lua: the start of handler
// calls of events a consumer holds (read, claimed, read ahead or set
// aside), one shard's batch a call (Set.Consume, Set.Reserve).

// The attempts begins.lua gives for an event not begun.
const (
	// BeginUsed: every attempt is used (a claim buries it).
	BeginUsed = -1
	// BeginFull: its owner holds every slot (WithOwnerConcurrency);
	// nothing changed.
	BeginFull = -2
	// BeginPaused: the group is paused (Pause); nothing changed.
	BeginPaused = -3
	// BeginOwnerPaused: the event's owner is paused in the group (Pause);
	// nothing changed.
	BeginOwnerPaused = -4
)

// BeginItem is one event to begin: its entry ID, the token of the call to
// make of it, its owner ("" for a job of no owner: no slot, no owner
// pause) and whether it is fresh: a new event this consumer read so lately
// that no other can have taken it and no call of it has begun, so it is
// begun without a look at the pending list or the attempts field.
type BeginItem struct {
	ID, Token, Owner string
	Fresh            bool
}

// Begun is begins.lua's reply for one item.
type Begun struct {
	// Attempt is the call's attempt number when begun (> 0); else 0 (another
	// consumer holds the event, or it was acknowledged or trimmed),
	// BeginUsed, BeginFull, BeginPaused or BeginOwnerPaused.
	Attempt int
	Taken   bool  // the lease was taken now (else the read's or claim's runs on)
	Full    bool  // the call took its owner's last free slot, for certain (see begins.lua)
	Err     error // the item's reply was malformed (ErrUnexpectedReply)
}

// beginFresh is the index of begins.lua's count of fresh items (ARGV[7]).
const beginFresh = 6

// BeginsCall builds the call that begins items (at most MaxBatch, the
// fresh first) for c on shard: begin_fresh.lua's when every item is fresh
// and c has no owner cap, else begins.lua's (beginsCall).
func (s *Store) BeginsCall(c Consumer, shard int, items []BeginItem) *Call {
	if c.OwnerCap == 0 && !slices.ContainsFunc(items, func(it BeginItem) bool { return !it.Fresh }) {
		return s.beginFreshCall(c, shard, items)
	}
	return s.beginsCall(c, shard, items)
}

// beginsCall builds begins.lua's call. ARGV[7] counts the fresh items that
// lead; a fresh item after one that is not is sent as not fresh, which is
// always safe (the script then looks at the pending list).
func (s *Store) beginsCall(c Consumer, shard int, items []BeginItem) *Call {
	args := make([]any, 8, 8+3*len(items))
	lease := c.leaseMs()
	args[0], args[1], args[2], args[3], args[4], args[5] = c.Group, c.Name, lease, c.MaxAttempts, lease/6, c.OwnerCap
	args[7] = c.slotPrefix()
	fresh := 0
	for i, it := range items {
		if it.Fresh && fresh == i {
			fresh++
		}
		args = append(args, it.ID, it.Token, it.Owner)
	}
	args[beginFresh] = fresh
	return &Call{Op: "begin", Shard: shard, Script: scriptBegins, Keys: s.hotKeys(c, shard), Args: args}
}

// beginFreshCall builds begin_fresh.lua's call of items, all fresh, for c
// without an owner cap. It hands over to begins.lua's call of the same
// items, built then, while the group or an owner in it is paused.
func (s *Store) beginFreshCall(c Consumer, shard int, items []BeginItem) *Call {
	args := make([]any, 1, 1+2*len(items))
	args[0] = c.Group
	for _, it := range items {
		args = append(args, it.ID, it.Token)
	}
	return &Call{Op: "begin", Shard: shard, Script: scriptBeginFresh, Keys: s.hotKeys(c, shard), Args: args,
		handover: func() *Call { return s.beginsCall(c, shard, items) }}
}

// ReadBegins reads the reply of c, a call of begins.lua or begin_fresh.lua
// of n items: one Begun per item, in order (begin_fresh.lua's reply of one
// item is its integer). The error is the call's, or ErrUnexpectedReply for
// a reply that is not one item per item sent; an item's own malformed
// reply is its Begun's Err.
func ReadBegins(c *Call, n int) ([]Begun, error) {
	if c.Err != nil {
		return nil, c.Err
	}
	xs, ok := c.Reply.([]any)
	if one, isInt := c.Reply.(int64); isInt && n == 1 && c.Script == scriptBeginFresh {
		xs, ok = []any{one}, true
	}
	if !ok || len(xs) != n {
		return nil, Unexpected("begins.lua", c.Reply)
	}
	out := make([]Begun, n)
	for i, x := range xs {
		b, ok := readBegun(x)
		if !ok {
			b = Begun{Err: Unexpected("begins.lua", c.Reply)}
		}
		out[i] = b
	}
	return out, nil
}

// readBegun reads one item of begins.lua's reply: 4 x attempt + 2 when
// taken now + 1 when the owner's slots are all held, or 0 to -4.
func readBegun(v any) (Begun, bool) {
	n, ok := Int64(v)
	if !ok || n <= 0 {
		return Begun{Attempt: int(n)}, ok && n >= BeginOwnerPaused
	}
	return Begun{Attempt: int(n >> 2), Taken: n&2 != 0, Full: n&1 != 0}, n >= 4
}
