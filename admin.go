package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

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
	deleted := 0
	for shard := 0; shard < cfg.Shards; shard++ {
		pattern := keyPrefix + "{" + name + ":" + strconv.Itoa(shard) + "}:*"
		keys, err := scanKeys(ctx, rdb, pattern)
		if err != nil {
			return deleted, err
		}
		sk := newShardKeys(name, shard)
		for _, k := range keys {
			if !sk.owns(k) {
				continue
			}
			n, err := rdb.Unlink(ctx, k).Result()
			if err != nil {
				return deleted, fmt.Errorf("expset: drop %s: %w", k, err)
			}
			deleted += int(n)
		}
	}
	for _, k := range []string{sweepersKey(name), metaKey(name)} {
		n, err := rdb.Unlink(ctx, k).Result()
		if err != nil {
			return deleted, fmt.Errorf("expset: drop %s: %w", k, err)
		}
		deleted += int(n)
	}
	return deleted, nil
}

// scanKeys lists the keys matching pattern, on every master of a cluster.
func scanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c redis.Cmdable) ([]string, error) {
		var out []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("expset: scan %s: %w", pattern, err)
		}
		return out, nil
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	var (
		out []string
		mu  sync.Mutex
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := scan(ctx, c)
		mu.Lock()
		out = append(out, keys...)
		mu.Unlock()
		return err
	})
	return out, err
}

// OwnerKey returns the Redis key of owner's sorted set, for operators and
// tools that read it directly ("" for a zero or nil Set).
func (s *Set) OwnerKey(owner string) string {
	if s.Shards() == 0 {
		return ""
	}
	return s.shards[s.ShardOf(owner)].owner + owner
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
	key := s.shards[shard].events
	if after == "$" {
		last, err := s.rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return nil, after, fmt.Errorf("expset: read %s: %w", key, err)
		}
		after = "0-0"
		if len(last) == 1 {
			after = last[0].ID
		}
	}
	args := &redis.XReadArgs{Streams: []string{key, after}, Count: int64(count), Block: -1}
	if block > 0 {
		args.Block = max(block, time.Millisecond) // BLOCK 0 would wait forever
	}
	res, err := s.rdb.XRead(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, after, nil
	}
	if err != nil {
		return nil, after, fmt.Errorf("expset: read %s: %w", key, err)
	}
	var out []Expiry
	for _, st := range res {
		for _, m := range st.Messages {
			after = m.ID
			e, err := parseExpiry(shard, m, 0)
			if err != nil {
				return out, after, err
			}
			out = append(out, e)
		}
	}
	return out, after, nil
}
