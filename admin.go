package expset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// The operator's calls, apart from the everyday API, for tools such as the
// expset command: Drop, ReadEvents and OwnerKey here; the recorded
// configuration (ReadConfiguration) in configuration.go, Stats (with each
// shard's stream keys) in stats.go, dead letters (DeadLetters, Kick,
// DeleteDeadLetters) in deadletters.go.

// Drop deletes every key of the set called name: its owners, payloads,
// indexes, event and dead-letter streams, leases and recorded configuration.
// It is meant for tests, demos and retiring a set, not for a set in use: a
// write racing with Drop may survive it. It returns how many keys it deleted.
// It deletes only the set's own keys, whatever its neighbours' names: the
// set "a:1", whose keys the patterns of "a" partly match, is left whole.
func Drop(ctx context.Context, rdb redis.UniversalClient, name string) (int, error) {
	cfg, err := ReadConfiguration(ctx, rdb, name)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return store.Drop(ctx, rdb, name, cfg.Shards)
}

// OwnerKey returns the Redis key of owner's sorted set, for operators and
// tools that read it directly ("" for a zero or nil Set).
func (s *Set) OwnerKey(owner string) string {
	if s.Shards() == 0 {
		return ""
	}
	return s.st.OwnerKey(owner)
}

// ReadEvents returns up to count expiry events (1 to 1000) of one shard's
// stream whose IDs come after after, and the ID to pass as after next time.
// It only reads (XREAD, outside any consumer group): nothing is delivered,
// claimed or acknowledged, so a tool watching the stream (expset events tail)
// takes nothing from the consumers. after "$" starts after the newest event
// the stream holds now; "0-0" starts at its oldest. With block over zero it
// waits up to block (at least 1ms) for an event when there is none yet,
// holding a connection meanwhile; with zero it returns at once. The events
// returned have Attempt 0: they were not delivered. A malformed entry ends the
// read with an "expset: unexpected reply" error, the events before it, and an ID past it.
//
// An event leaves its stream once every consumer group has handled it: a
// read that does not wait may miss an event handled in between. A reader blocked in ReadEvents when an
// event is written gets it before any other command runs.
func (s *Set) ReadEvents(ctx context.Context, shard int, after string, count int, block time.Duration) ([]Expiry, string, error) {
	if err := s.opened(); err != nil {
		return nil, after, err
	}
	if !s.events {
		return nil, after, fmt.Errorf("%w: set %q has no expiry events: open it WithExpiryEvents to read them", ErrInvalidArgument, s.name)
	}
	if _, _, err := s.shardRange(shard); err != nil || shard == allShards {
		return nil, after, fmt.Errorf("%w: shard %d (want 0 to %d)", ErrInvalidArgument, shard, len(s.shards)-1)
	}
	if after != "$" && after != "0" && !validStreamID(after) {
		return nil, after, fmt.Errorf("%w: after %q: want \"$\", \"0\" or a stream ID (ms-seq)", ErrInvalidArgument, after)
	}
	if count < 1 || count > maxBatch {
		return nil, after, fmt.Errorf("%w: count %d (want 1 to %d)", ErrInvalidArgument, count, maxBatch)
	}
	msgs, next, err := s.st.ReadEvents(ctx, shard, after, count, block)
	if err != nil {
		return nil, next, err
	}
	var out []Expiry
	for _, m := range msgs {
		e, err := parseExpiry(shard, m, 0)
		if err != nil {
			return out, m.ID, err
		}
		out = append(out, e)
	}
	return out, next, nil
}
