package expset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// EventsKey returns the Redis key of shard's expiry event stream, for
// operators and tools that name it; "" when shard is not 0 to Shards()-1.
func (s *Set) EventsKey(shard int) string {
	if shard < 0 || shard >= s.Shards() {
		return ""
	}
	return s.shards[shard].events
}

// DeadLettersKey returns the Redis key of shard's dead-letter stream; "" when
// shard is not 0 to Shards()-1.
func (s *Set) DeadLettersKey(shard int) string {
	if shard < 0 || shard >= s.Shards() {
		return ""
	}
	return s.shards[shard].dead
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
// read with ErrUnexpectedReply, the events before it, and an ID past it.
//
// An event leaves its stream once every consumer group has handled it: a
// read that does not wait may miss an event handled in between. A reader blocked in ReadEvents when an
// event is written gets it before any other command runs.
func (s *Set) ReadEvents(ctx context.Context, shard int, after string, count int, block time.Duration) ([]Expiry, string, error) {
	if err := s.opened(); err != nil {
		return nil, after, err
	}
	if !s.events {
		return nil, after, fmt.Errorf("%w: set %q", ErrNoEvents, s.name)
	}
	if _, _, err := s.shardRange(shard); err != nil || shard == AllShards {
		return nil, after, fmt.Errorf("%w: shard %d (want 0 to %d)", ErrInvalidOption, shard, len(s.shards)-1)
	}
	if after != "$" && after != "0" && !validStreamID(after) {
		return nil, after, fmt.Errorf("%w: after %q: want \"$\", \"0\" or a stream ID (ms-seq)", ErrInvalidOption, after)
	}
	if count < 1 || count > maxBatch {
		return nil, after, fmt.Errorf("%w: count %d (want 1 to %d)", ErrInvalidOption, count, maxBatch)
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
