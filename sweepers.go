package expset

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// A Sweeper's lease. Each Sweeper.Run holds one lease, an entry of the set's
// sweeper registry (sweepersKey, lua/sweepers.lua) that it renews about every
// third of WithLeaseTTL, and sweeps the shards the live leases assign it
// (holder): the shards are dealt round-robin over the live sweepers, ordered
// by token. Renewing costs one script call whatever the shard count, on one
// server or a cluster (the registry is one key).
//
// The leases only share out the work: every sweep script re-checks what it
// removes, so two sweepers on one shard (while a joining or leaving sweeper's
// peers have not yet renewed and seen it) remove each member, and write its
// event, once. They never both sweep a shard for longer than a third of the
// lease TTL. A sweeper killed keeps its shards until its lease ends; the
// others read the registry when it ends and take them over.

// sweepersKey is the key of set name's sweeper registry.
func sweepersKey(name string) string { return keyPrefix + "{" + name + "}:sweepers" }

var scriptSweepers = script("sweepers.lua")

// registry is one reply of lua/sweepers.lua.
type registry struct {
	now    int64    // the server's TIME, ms
	joined bool     // the caller's entry was not there
	tokens []string // the live sweepers, sorted
	first  int64    // the earliest lease end of the others (ms, server TIME); 0 when none
}

// sweepers runs lua/sweepers.lua: ttl > 0 joins or renews token's lease, ttl
// 0 leaves, ttl < 0 only reads. One round trip.
func (s *Set) sweepers(ctx context.Context, token string, ttl time.Duration) (registry, error) {
	arg := ""
	if ttl >= 0 {
		arg = fmt.Sprint(ttl.Milliseconds())
	}
	v, err := s.run(ctx, "lease", -1, scriptSweepers, []string{sweepersKey(s.name)}, token, arg)
	if err != nil {
		return registry{}, err
	}
	xs, ok := v.([]any)
	if !ok || len(xs) < 2 || len(xs)%2 != 0 {
		return registry{}, unexpected("sweepers.lua", v)
	}
	var r registry
	var joined int64
	r.now, ok = asInt64(xs[0])
	joined, ok2 := asInt64(xs[1])
	if !ok || !ok2 {
		return registry{}, unexpected("sweepers.lua", v)
	}
	r.joined = joined == 1
	for i := 2; i < len(xs); i += 2 {
		tok, ok := asString(xs[i])
		end, ok2 := asInt64(xs[i+1])
		if !ok || !ok2 {
			return registry{}, unexpected("sweepers.lua", v)
		}
		r.tokens = append(r.tokens, tok)
		if tok != token && (r.first == 0 || end < r.first) {
			r.first = end
		}
	}
	slices.Sort(r.tokens)
	return r, nil
}

// holder returns which of tokens (sorted) sweeps shard i: "" when none.
func holder(tokens []string, i int) string {
	if len(tokens) == 0 {
		return ""
	}
	return tokens[i%len(tokens)]
}

// sweeperLease is a Run's lease and what it last read of the registry. It
// is not safe for simultaneous use.
type sweeperLease struct {
	token   string
	ttl     time.Duration
	tokens  []string  // the live sweepers at the last renewal, sorted; nil before the first
	renewed time.Time // when the last renewal was sent (this process's clock)
	peerEnd time.Time // when the first other lease read ends, unless renewed (zero: none)
	retry   backoff   // renewals failing in a row
	next    time.Time // when to renew next
}

func newSweeperLease(ttl time.Duration) *sweeperLease {
	return &sweeperLease{token: uuid.NewString(), ttl: ttl}
}

// due reports whether the lease is to be renewed at now: a third of its TTL
// after the last renewal, when another sweeper's lease read last may have
// ended, or after a failure's backoff.
func (l *sweeperLease) due(now time.Time) bool { return !now.Before(l.next) }

// renew renews the lease and reads the registry. A lease found ended or
// removed (someone else may have its shards by now) is taken anew, with the
// same token, and reported as ErrLeaseLost; a Redis error leaves the last
// reading in place (sweeping on is at worst work done twice) and matches
// errRefresh.
func (w *Sweeper) renew(ctx context.Context, l *sweeperLease) error {
	sent := time.Now()
	r, err := w.set.sweepers(ctx, l.token, l.ttl)
	if err != nil {
		l.next = time.Now().Add(l.retry.fail())
		return fmt.Errorf("%w: %s: %w", errRefresh, sweepersKey(w.set.name), err)
	}
	l.retry.ok()
	first := l.tokens == nil
	l.tokens, l.renewed = r.tokens, sent
	l.next = sent.Add(l.ttl / 3)
	l.peerEnd = time.Time{}
	if r.first > 0 {
		// The registry's clock is the server's: wait for the distance.
		l.peerEnd = sent.Add(time.Duration(r.first-r.now) * time.Millisecond)
		l.next = minTime(l.next, l.peerEnd)
	}
	if r.joined && !first {
		return fmt.Errorf("%w: %s: the lease of sweeper %s had ended; taken anew", ErrLeaseLost, sweepersKey(w.set.name), l.token)
	}
	return nil
}

// holds reports whether the lease's last reading gives it shard i.
func (l *sweeperLease) holds(i int) bool { return holder(l.tokens, i) == l.token }

// leave removes the lease, with a context that outlives the caller's: a
// Run that ends hands its shards over at once.
func (w *Sweeper) leave(ctx context.Context, l *sweeperLease) {
	if l.tokens == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = w.set.sweepers(ctx, l.token, 0)
}
