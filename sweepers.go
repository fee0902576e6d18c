package expset

import (
	"context"
	"fmt"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/google/uuid"
)

// A Sweeper's lease. Each Sweeper.Run holds one lease, an entry of the set's
// sweeper registry (sweepersKey, internal/store/lua/sweepers.lua) that it renews about every
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

// sweepers runs internal/store/lua/sweepers.lua (internal/store/sweepers.go): ttl > 0
// joins or renews token's lease, ttl 0 leaves, ttl < 0 only reads. One
// round trip.
func (s *Set) sweepers(ctx context.Context, token string, ttl time.Duration) (store.Registry, error) {
	return s.st.Sweepers(ctx, token, ttl)
}

// sweepersKey is the key of set name's sweeper registry.
func sweepersKey(name string) string { return store.SweepersKey(name) }

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
	l.tokens, l.renewed = r.Tokens, sent
	l.next = sent.Add(l.ttl / 3)
	l.peerEnd = time.Time{}
	if r.First > 0 {
		// The registry's clock is the server's: wait for the distance.
		l.peerEnd = sent.Add(time.Duration(r.First-r.Now) * time.Millisecond)
		l.next = minTime(l.next, l.peerEnd)
	}
	if r.Joined && !first {
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
