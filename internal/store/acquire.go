package store

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// acquire.go serves acquire.lua: Quota.Acquire, and AcquireWait's calls
// (flag w).

// Acquire is one Acquire's arguments, validated.
type Acquire struct {
	Owner, Member string
	TTL           int64 // ms
	Limit         int
	Evict         bool  // WithEvictOldest (flag v)
	Refresh       bool  // WithRefresh (flag r)
	ReceiptTTL    int64 // ms: an eviction receipt's life (with Evict)
	Payload       []byte
	HasPayload    bool // a payload goes with the call (flag P), even an empty one
}

// Decision is acquire.lua's decision, in the fields of expset.Decision.
type Decision struct {
	Allowed    bool
	Existing   bool
	Count      int
	Limit      int
	Deadline   time.Time
	RetryAfter time.Duration
	Evicted    []string
	Durable    bool
}

// acquireCall builds acquire.lua's call for a. The common call sends ttl,
// member and limit alone; an evicting quota ignores the wait line and
// declares the eviction receipt instead.
func (s *Store) acquireCall(a Acquire) *Call {
	flags := s.flags
	if a.Evict {
		flags += "v"
	}
	if a.Refresh {
		flags += "r"
	}
	if a.HasPayload {
		flags += "P"
	}
	args := []any{a.TTL, a.Member, a.Limit}
	if flags != "" || s.clock != nil {
		args = append(args, flags, s.now(), a.Owner)
	}
	if a.HasPayload {
		args = append(args, a.Payload)
	}
	keys := s.lineKeys(a.Owner)
	if a.Evict {
		if !a.HasPayload {
			args = append(args, "")
		}
		args = append(args, a.ReceiptTTL)
		sk := &s.shards[s.ShardOf(a.Owner)]
		keys = []string{sk.Owner + a.Owner, sk.Due, sk.Events, sk.Payload + a.Owner, evictionReceiptKey(sk, a)}
	}
	return &Call{Op: "acquire", Shard: s.ShardOf(a.Owner), Script: scriptAcquire, Keys: keys, Args: args}
}

// waiterCall builds the call of a waiter of AcquireWait (acquire.lua's flag
// w): a's call with every argument up to the owner, w among the flags, then
// the ticket and its lease in ms, and the owner's leases key before its line
// key.
func (s *Store) waiterCall(a Acquire, ticket string, lease time.Duration) *Call {
	c := s.acquireCall(Acquire{Owner: a.Owner, Member: a.Member, TTL: a.TTL, Limit: a.Limit, Refresh: a.Refresh, Payload: a.Payload, HasPayload: a.HasPayload})
	if len(c.Args) == 3 {
		c.Args = append(c.Args, "", s.now(), a.Owner)
	}
	c.Args[3] = c.Args[3].(string) + "w"
	c.Args = append(c.Args, ticket, lease.Milliseconds())
	c.Keys = append(s.ownerKeys(a.Owner), s.waitKeys(a.Owner)...)
	return c
}

// readDecision reads acquire.lua's reply to a call at limit: one integer
// (value*256 + count*4 + status; from acquire_plain.lua also retry*2^22 +
// count*4 + 3, a denial), the text "status count value" with the members
// evicted after it (from acquire_plain.lua: readDecisionText) or the table {status, count, deadline, retry,
// evicted...}; value is the deadline, or the retry when denied.
func readDecision(v any, limit int) (Decision, error) {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return Decision{}, Unexpected("acquire.lua", v)
		}
		if x&3 == 3 { // a denial with a count of 64 or more
			if n, retry := x>>2&(1<<20-1), x>>22; n >= 64 && retry >= 1 {
				return decision(v, 0, n, retry, limit)
			}
			return Decision{}, Unexpected("acquire.lua", v)
		}
		return decision(v, x&3, x>>2&63, x>>8, limit)
	case string:
		return readDecisionText(x, limit)
	}
	xs, ok := v.([]any)
	if !ok || len(xs) < 4 {
		return Decision{}, Unexpected("acquire.lua", v)
	}
	var n [4]int64
	for i := range n {
		if n[i], ok = Int64(xs[i]); !ok {
			return Decision{}, Unexpected("acquire.lua", v)
		}
	}
	value := n[2]
	if n[0] == 0 {
		value = n[3] // 0 after a partial eviction
	}
	var evicted []string
	for _, e := range xs[4:] {
		id, ok := String(e)
		if !ok {
			return Decision{}, Unexpected("acquire.lua", v)
		}
		evicted = append(evicted, id)
	}
	d, err := decision(v, n[0], n[1], value, limit)
	d.Evicted = evicted
	return d, err
}

// readDecisionText reads acquire_plain.lua's text reply: "status count
// value", where after an eviction, or for a retry of one while its receipt
// lasts, " expires" and the evicted members follow as the receipt holds
// them, " <length>:<member>" each.
func readDecisionText(x string, limit int) (Decision, error) {
	bad := func() (Decision, error) { return Decision{}, Unexpected("acquire_plain.lua", x) }
	var n [4]int64
	rest := x
	for i := range n {
		var f string
		var more bool
		f, rest, more = strings.Cut(rest, " ")
		var err error
		if n[i], err = strconv.ParseInt(f, 10, 64); err != nil || n[i] < 0 {
			return bad()
		}
		if !more {
			if i != 2 {
				return bad()
			}
			return decision(x, n[0], n[1], n[2], limit)
		}
	}
	var evicted []string
	for rest != "" {
		l, after, ok := strings.Cut(rest, ":")
		size, err := strconv.Atoi(l)
		if !ok || err != nil || size < 1 || size > len(after) {
			return bad()
		}
		evicted, rest = append(evicted, after[:size]), after[size:]
		if rest != "" {
			if rest[0] != ' ' || len(rest) == 1 {
				return bad()
			}
			rest = rest[1:]
		}
	}
	if len(evicted) == 0 || n[0] == 0 {
		return bad()
	}
	d, err := decision(x, n[0], n[1], n[2], limit)
	d.Evicted = evicted
	return d, err
}

// decision is the Decision of status, count and value (the deadline, or
// the retry in ms when denied) read from the reply v: an allowed member
// counts itself and has a deadline, except in a table after an eviction.
func decision(v any, status, count, value int64, limit int) (Decision, error) {
	d := Decision{Count: int(count), Limit: limit}
	switch status {
	case 0:
		d.RetryAfter = time.Duration(value) * time.Millisecond
	case 1, 2:
		if _, table := v.([]any); !table && (count < 1 || value < 1) {
			return Decision{}, Unexpected("acquire.lua", v)
		}
		d.Allowed, d.Existing = true, status == 2
		d.Deadline = msTime(value)
	default:
		return Decision{}, Unexpected("acquire.lua", v)
	}
	return d, nil
}

// acquireWrote reports whether an acquire.lua reply admitted a member anew:
// the one write an Acquire waits to see acknowledged.
func acquireWrote(v any) bool {
	d, err := readDecision(v, 1)
	return err == nil && d.Allowed && !d.Existing
}

// decided reads the reply of c, an acquire.lua call at limit that ran:
// its decision, Durable when WithDurability's acknowledgements came after
// an admission anew.
func decided(c *Call, limit int) (Decision, error) {
	if c.Err != nil {
		return Decision{}, c.Err
	}
	d, err := readDecision(c.Reply, limit)
	d.Durable = c.Durable && d.Allowed && !d.Existing
	return d, err
}

// evictionReceiptKey is the key of the eviction receipt of a's admission
// (acquire.lua's KEYS[5]) in its owner's shard sk.
func evictionReceiptKey(sk *Keys, a Acquire) string {
	return sk.Receipt + strconv.Itoa(len(a.Owner)) + ":" + a.Owner + a.Member
}

// plainCall builds acquire_plain.lua's call for a, or returns nil when
// only acquire.lua serves it: a clock, an option of the call but
// WithEvictOldest, or a set with payloads or with the due index but no
// events. An evicting quota's call declares its eviction receipt instead
// of the wait line, and sends the receipt's life.
func (s *Store) plainCall(a Acquire) *Call {
	if s.clock != nil || a.Refresh || a.HasPayload || (s.flags != "" && s.flags != "ei") {
		return nil
	}
	shard := s.ShardOf(a.Owner)
	sk := &s.shards[shard]
	keys := []string{sk.Owner + a.Owner, sk.Line + a.Owner}
	args := []any{a.TTL, a.Member, a.Limit}
	if a.Evict {
		keys[1] = evictionReceiptKey(sk, a)
		args = append(args, a.ReceiptTTL)
	}
	if s.flags != "" {
		keys = append(keys, sk.Due)
	}
	return &Call{Op: "acquire", Shard: shard, Script: scriptAcquirePlain, Keys: keys, Args: args}
}

// Acquire runs acquire.lua for a and returns its decision. The common call
// (plainCall) runs acquire_plain.lua first, and acquire.lua only when that
// replies -1 (a wait line to respect, or expired members it leaves).
func (s *Store) Acquire(ctx context.Context, a Acquire) (Decision, error) {
	if p := s.plainCall(a); p != nil {
		s.runWrite(ctx, p, true, acquireWrote)
		if x, ok := p.Reply.(int64); p.Err != nil || !ok || x != -1 {
			return decided(p, a.Limit)
		}
	}
	c := s.acquireCall(a) // built only when acquire.lua runs
	s.runWrite(ctx, c, true, acquireWrote)
	return decided(c, a.Limit)
}

// Queued is a waiter's denial: its rank in the owner's line (0 for the
// head) and, for the head, when the earliest deadline comes.
type Queued struct {
	Rank  int
	Retry time.Duration
}

// readQueued reads a waiter's denial, {3, count, rank, retry}; queued is
// false for any other reply (an admission, read by readDecision).
func readQueued(v any) (q Queued, queued bool, err error) {
	xs, ok := v.([]any)
	if !ok || len(xs) != 4 {
		return Queued{}, false, nil
	}
	if st, ok := Int64(xs[0]); !ok || st != 3 {
		return Queued{}, false, nil
	}
	r, ok1 := Int64(xs[2])
	ms, ok2 := Int64(xs[3])
	if !ok1 || !ok2 || r < 0 {
		return Queued{}, true, Unexpected("acquire.lua", v)
	}
	return Queued{Rank: int(r), Retry: time.Duration(max(ms, 1)) * time.Millisecond}, true, nil
}

// Waiter is the acquire.lua call of one AcquireWait, built once: every try
// sends the same arguments.
type Waiter struct {
	s     *Store
	c     *Call
	limit int
}

// Waiter returns the call of a waiter of AcquireWait for a, holding ticket,
// leased for lease.
func (s *Store) Waiter(a Acquire, ticket string, lease time.Duration) *Waiter {
	return &Waiter{s: s, c: s.waiterCall(a, ticket, lease), limit: a.Limit}
}

// Acquire runs the waiter's call and returns its decision, or queued with
// its place when it is denied and waits on.
func (w *Waiter) Acquire(ctx context.Context) (d Decision, q Queued, queued bool, err error) {
	c := w.c
	c.Reply, c.Err, c.Durable = nil, nil, false
	w.s.runWrite(ctx, c, true, acquireWrote)
	if c.Err != nil {
		return Decision{}, Queued{}, false, c.Err
	}
	if q, queued, err = readQueued(c.Reply); queued || err != nil {
		return Decision{}, q, queued, err
	}
	d, err = decided(c, w.limit)
	return d, Queued{}, false, err
}
