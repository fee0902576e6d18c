package expset

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/expset/expset/internal/store"
)

// Quota caps how many live members each owner of a Set may hold: "at most 3
// unpaid orders per user, each expiring 15 minutes after it was placed".
// Every Acquire is one Lua script that drops the owner's expired members,
// recognises a retry of a member already held, and admits or denies, so no
// number of concurrent callers can over-admit. A Quota is safe for
// simultaneous use by multiple goroutines; several quotas with different
// limits may share one Set. The zero value is not usable: a zero or nil
// *Quota's calls fail with ErrInvalidArgument; create one with NewQuota.
type Quota struct {
	set        *Set
	limit      int
	evict      bool
	refresh    bool
	receiptTTL time.Duration
	receiptSet bool // WithEvictionReceiptTTL was given
}

// Decision is the outcome of Acquire. With a limit of 3 and two live members
// held, an Acquire of a third member reports Allowed=true, Count=3, Limit=3;
// the next Acquire of a fourth reports Allowed=false, Count=3 and RetryAfter
// the time until the earliest of the three expires.
type Decision struct {
	Allowed    bool          // member holds a slot after the call
	Existing   bool          // it already held one: a retried Acquire is safe and takes no second slot
	Count      int           // live members after the call
	Limit      int           // the limit this call applied
	Deadline   time.Time     // the member's deadline when Allowed
	RetryAfter time.Duration // when denied: time until enough live members expire to make room (the earliest one, at the limit)
	Evicted    []string      // with WithEvictOldest: members evicted to make room, earliest deadline first (see Acquire for a retry)
	Durable    bool          // with WithDurability: the admission was acknowledged as asked before the call returned (false for a denial or an Existing member)
}

// NewQuota returns a quota of limit live members per owner of s (1 to
// 2^30). Options: WithEvictOldest, WithEvictionReceiptTTL (only with
// WithEvictOldest), WithRefreshOnReacquire.
func NewQuota(s *Set, limit int, opts ...QuotaOption) (*Quota, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: NewQuota of a nil Set: open it with Open", ErrInvalidArgument)
	}
	if err := s.opened(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > maxLimit {
		return nil, fmt.Errorf("%w: limit %d (want 1 to %d)", ErrInvalidArgument, limit, maxLimit)
	}
	q := &Quota{set: s, limit: limit, receiptTTL: defaultEvictionReceiptTTL}
	if err := applyOptions(opts, q, QuotaOption.applyQuota); err != nil {
		return nil, err
	}
	if q.receiptSet && !q.evict {
		return nil, fmt.Errorf("%w: WithEvictionReceiptTTL needs WithEvictOldest: receipts record evictions; give both, or drop WithEvictionReceiptTTL", ErrInvalidArgument)
	}
	return q, nil
}

// opened returns ErrInvalidArgument for a nil or zero Quota.
func (q *Quota) opened() error {
	if q == nil || q.set == nil || q.limit < 1 {
		return fmt.Errorf("%w: zero or nil *Quota: create it with NewQuota", ErrInvalidArgument)
	}
	return q.set.opened()
}

// Acquire gives member a slot among owner's live members, with the deadline
// now+ttl, if fewer than the limit are live. A member that already holds a
// slot is reported with Allowed and Existing, keeping its deadline (or
// setting it to now+ttl with WithRefreshOnReacquire): retrying an Acquire
// whose reply was lost is safe. At the limit it denies with RetryAfter, or evicts the
// earliest-deadline members with WithEvictOldest. A denial is not an error.
// Options: WithLimit (this owner's limit for this call), WithPayload. On a
// set WithDurability, the call waits for the acknowledgements asked (in the
// script's round trip, up to the option's timeout: see WithDurability) and
// reports them for an admission of a new member in Decision.Durable.
//
// With WithEvictOldest, a retry reports what the first run evicted: when
// the Acquire that admitted member evicted others, a later Acquire of the
// same member, while it holds the slot that admission gave it and within
// WithEvictionReceiptTTL (default 5 minutes) of it, returns Allowed,
// Existing and Evicted = the members the admission evicted. This covers a
// retry by go-redis after a read timeout and one by the application. After
// the receipt has lapsed, or for an admission that evicted nothing, a retry
// reports Evicted empty. A receipt is matched by the member's deadline: a
// member released and admitted again at the very same deadline within the
// window is reported with the evictions of its earlier admission. With
// expiry events every evicted member also gets one event (Expiry.Evicted
// set), whatever happens to the reply.
//
// One call moves at most 1000 members and about 1 MiB of payloads (see
// docs/design.md): when more members must be evicted than that (a limit
// lowered far below the live count), Acquire evicts as many as it may,
// reports them in Evicted, and denies with RetryAfter 0; calling it again
// continues.
func (q *Quota) Acquire(ctx context.Context, owner, member string, ttl time.Duration, opts ...AcquireOption) (Decision, error) {
	c, err := q.prepare(owner, member, ttl, opts)
	if err != nil {
		return Decision{}, err
	}
	return q.acquire(ctx, c)
}

// acquire runs one prepared Acquire.
func (q *Quota) acquire(ctx context.Context, a store.Acquire) (Decision, error) {
	d, err := q.set.st.Acquire(ctx, a)
	return q.set.decided(ctx, a, d, err)
}

// decided returns the decision d of Acquire a, or err, and reports a
// decision to Hooks.OnAcquire.
func (s *Set) decided(ctx context.Context, a store.Acquire, d store.Decision, err error) (Decision, error) {
	if err == nil && s.hooks.OnAcquire != nil {
		s.hooks.OnAcquire(ctx, CallInfo{Set: s.name, Op: "acquire", Shard: s.ShardOf(a.Owner)}, Decision(d))
	}
	return Decision(d), err
}

// prepare validates one Acquire and returns its arguments; it sends
// nothing.
func (q *Quota) prepare(owner, member string, ttl time.Duration, opts []AcquireOption) (store.Acquire, error) {
	if err := q.opened(); err != nil {
		return store.Acquire{}, err
	}
	s := q.set
	if err := s.checkOwnerMember(owner, member); err != nil {
		return store.Acquire{}, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return store.Acquire{}, err
	}
	c, err := callOptions(s, opts, AcquireOption.applyAcquire)
	if err != nil {
		return store.Acquire{}, err
	}
	limit := q.limit
	if c.limit != 0 {
		limit = c.limit
	}
	return store.Acquire{Owner: owner, Member: member, TTL: ms, Limit: limit, Evict: q.evict, Refresh: q.refresh,
		ReceiptTTL: q.receiptTTL.Milliseconds(), Payload: c.payload, HasPayload: c.hasPayload}, nil
}

// Release gives up member's slot and reports whether it held one (an expired
// member held none).
func (q *Quota) Release(ctx context.Context, owner, member string) (bool, error) {
	if err := q.opened(); err != nil {
		return false, err
	}
	if err := q.set.checkOwnerMember(owner, member); err != nil {
		return false, err
	}
	n, err := q.set.Remove(ctx, owner, member)
	return n > 0, err
}

// AcquireRequest is one Acquire of a batch given to Quota.AcquireMany: the
// same owner, member, ttl and call options Acquire takes.
type AcquireRequest struct {
	Owner   string
	Member  string
	TTL     time.Duration
	Options []AcquireOption
}

// BatchError reports the requests of a batch that failed in Redis. Errs has
// one entry per request, in order: nil where the request succeeded (its
// Decision is valid), the request's error where it failed (its Decision is
// the zero Decision: not allowed). errors.Is and errors.As see every non-nil
// entry: a network error, a timeout or a Redis error of any request matches.
type BatchError struct {
	Errs []error
}

// Error lists the failed requests by index, the first few in full.
func (e *BatchError) Error() string {
	var b strings.Builder
	failed := 0
	for i, err := range e.Errs {
		if err == nil {
			continue
		}
		failed++
		if failed <= 3 {
			if failed > 1 {
				b.WriteString("; ")
			}
			b.WriteString("#" + strconv.Itoa(i) + ": " + err.Error())
		}
	}
	if failed > 3 {
		b.WriteString("; and " + strconv.Itoa(failed-3) + " more")
	}
	return "expset: " + strconv.Itoa(failed) + " of " + strconv.Itoa(len(e.Errs)) + " requests failed: " + b.String()
}

// Unwrap returns the errors of the failed requests.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// AcquireMany runs many Acquires in one round trip (one per node on Redis
// Cluster; a shard's requests past the first 100 take one more round trip
// per 100): the requests of one shard go together in one script call
// (acquire_many.lua, at most 100 requests each), which runs each of them as
// Acquire's script would, one after the other, reading the server's clock
// once. Each request is as atomic as an Acquire (the requests of one call
// even run together), the batch as a whole is not. Requests for one owner
// run in the order given; a batch may hold several requests for one owner
// ("a", then "b" and "c" at a limit of 2 admits a and b and denies c).
//
// Every request is validated first: a bad one fails the whole call with an
// error that names its index and wraps ErrInvalidArgument, and nothing is
// sent. Otherwise AcquireMany returns one Decision per request, in order. When some requests fail in Redis (a
// network error, a key of another type), it still returns every Decision
// together with a *BatchError saying which failed; the others took effect.
// An empty batch returns (nil, nil) without a round trip.
//
// A script call moves at most twice what one Acquire may (expired members
// dropped, members evicted, payload bytes): a call that reaches it stops and
// its remaining requests go in the next round trip. When the server's script
// cache was flushed, the calls that got NOSCRIPT did not run: they are sent
// once more with the script.
func (q *Quota) AcquireMany(ctx context.Context, reqs []AcquireRequest) ([]Decision, error) {
	if err := q.opened(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	calls := make([]store.Acquire, len(reqs))
	for i, r := range reqs {
		c, err := q.prepare(r.Owner, r.Member, r.TTL, r.Options)
		if err != nil {
			return nil, fmt.Errorf("expset: AcquireMany request #%d: %w", i, err)
		}
		calls[i] = c
	}
	out := make([]Decision, len(reqs))
	var errs []error
	q.set.st.AcquireMany(ctx, calls, func(i int, d store.Decision, err error) {
		if err == nil {
			out[i], err = q.set.decided(ctx, calls[i], d, nil)
		}
		if err != nil {
			if errs == nil {
				errs = make([]error, len(reqs))
			}
			errs[i] = err
		}
	})
	if errs != nil {
		return out, &BatchError{Errs: errs}
	}
	return out, nil
}
