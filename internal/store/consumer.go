package store

import (
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// consumer.go holds what the consumer engine's scripts share (begins.go,
// take.go, ack.go, renew.go, retry.go, bury.go, release.go, claim.go,
// prune.go): the consumer's fixed arguments, the leases they name, the
// grouping of items into calls, and the reading of a stream entry's fields.

// RetryHolder is the consumer that holds events waiting for their retry
// delay: RETRY_HOLDER in lua/groups.lua. It never reads.
const RetryHolder = "expset:retry"

// Consumer is what the engine's scripts take of one consumer of a group:
// the same in each of its calls.
type Consumer struct {
	Group, Name string
	Lease       time.Duration // the lease TTL; sent in ms, at least 1
	MaxAttempts int           // WithMaxAttempts
	// OwnerCap is WithOwnerConcurrency's cap: above 0, each call begun
	// takes a slot of its event's owner (begins.lua); 0: no cap.
	OwnerCap int
}

// leaseMs is the lease TTL in ms, at least 1.
func (c Consumer) leaseMs() int64 { return max(c.Lease.Milliseconds(), 1) }

// Lease names one handler call's lease: the event's entry ID and the token
// of the call ("" for an event no call began).
type Lease struct {
	ID, Token string
}

// leaseKeys returns the keys of shard that a lease's scripts take: its
// event stream, its attempts hash and its owner slot counts.
func (s *Store) leaseKeys(shard int) []string {
	sk := &s.shards[shard]
	return []string{sk.Events, sk.Att, sk.Runo}
}

// hotKeys returns the keys of shard that c's begins, acknowledgements and
// renewals take: leaseKeys, without the slot counts for a consumer without
// an owner cap. Such a consumer's calls hold no slot, and the only events
// it handles whose last call held one come to it by a claim, which frees
// the slot (claim.lua).
func (s *Store) hotKeys(c Consumer, shard int) []string {
	keys := s.leaseKeys(shard)
	if c.OwnerCap == 0 {
		return keys[:2]
	}
	return keys
}

// slotPrefix is what the first-slot fields of c's group start with,
// given to begins.lua for a consumer with an owner cap, or "" without one.
func (c Consumer) slotPrefix() string {
	if c.OwnerCap == 0 {
		return ""
	}
	return "F" + slotPrefix(c.Group)
}

// leaseArgs appends the ID and token of each of leases to args.
func leaseArgs(args []any, leases []Lease) []any {
	for _, l := range leases {
		args = append(args, l.ID, l.Token)
	}
	return args
}

// readHeld reads the reply of a script that answers 1 or 0 per lease (ack,
// renew), n of them, from c: whether each lease was still its call's. A
// reply item other than 1 counts as not held.
func readHeld(script string, c *Call, n int) ([]bool, error) {
	if c.Err != nil {
		return nil, c.Err
	}
	xs, ok := c.Reply.([]any)
	if !ok || len(xs) != n {
		return nil, Unexpected(script, c.Reply)
	}
	held := make([]bool, n)
	for i, x := range xs {
		v, _ := Int64(x)
		held[i] = v == 1
	}
	return held, nil
}

// Batches groups items into batches of at most MaxBatch items each, one
// open batch per key (a shard, or a group and shard): the renewals, begins
// and acknowledgements that go in one pipeline, one script call a batch.
// The zero value is ready to use.
type Batches[K comparable, T any] struct {
	Keys  []K   // each batch's key
	Items [][]T // each batch's items, in the order added
	open  map[K]int
}

// Add adds item to the open batch of key, or to a new one when there is
// none or it is full.
func (b *Batches[K, T]) Add(key K, item T) {
	if b.open == nil {
		b.open = map[K]int{}
	}
	j, ok := b.open[key]
	if !ok || len(b.Items[j]) >= MaxBatch {
		j = len(b.Keys)
		b.open[key] = j
		b.Keys = append(b.Keys, key)
		b.Items = append(b.Items, nil)
	}
	b.Items[j] = append(b.Items[j], item)
}

// fieldMap reads a stream entry's {field, value, ...} from a script's
// reply.
func fieldMap(v any) (map[string]any, bool) {
	fs, ok := v.([]any)
	if !ok || len(fs)%2 != 0 {
		return nil, false
	}
	values := make(map[string]any, len(fs)/2)
	for j := 0; j < len(fs); j += 2 {
		k, ok := String(fs[j])
		if !ok {
			return nil, false
		}
		values[k] = fs[j+1]
	}
	return values, true
}

// IsNoGroup reports whether err is Redis's NOGROUP (the stream or the
// group is gone), also from a script's call (which miniredis reports after
// a prefix of its own).
func IsNoGroup(err error) bool {
	var re redis.Error
	return redis.HasErrorPrefix(err, "NOGROUP") || (errors.As(err, &re) && strings.Contains(re.Error(), ": NOGROUP "))
}
