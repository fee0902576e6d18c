package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// streams.go reads the shards' event and dead-letter streams
// (Set.ReadEvents, Set.DeadLetters) and deletes dead letters
// (Set.DeleteDeadLetters).

// DeadLetters reads the first count entries of shard's dead-letter stream
// (count 0: all).
func (s *Store) DeadLetters(ctx context.Context, shard int, count int64) ([]redis.XMessage, error) {
	key := s.shards[shard].Dead
	var (
		msgs []redis.XMessage
		err  error
	)
	if count > 0 {
		msgs, err = s.rdb.XRangeN(ctx, key, "-", "+", count).Result()
	} else {
		msgs, err = s.rdb.XRange(ctx, key, "-", "+").Result()
	}
	if err != nil {
		return nil, fmt.Errorf("expset: read %s: %w", key, err)
	}
	return msgs, nil
}

// DeleteDeadLetters deletes the entries ids of shard's dead-letter stream
// and returns how many there were.
func (s *Store) DeleteDeadLetters(ctx context.Context, shard int, ids []string) (int64, error) {
	key := s.shards[shard].Dead
	n, err := s.rdb.XDel(ctx, key, ids...).Result()
	if err != nil {
		return 0, fmt.Errorf("expset: delete from %s: %w", key, err)
	}
	return n, nil
}

// ReadEvents reads up to count entries of shard's event stream after the
// entry ID after ("$": its last entry now; "0": from the start), waiting
// up to block for one when there are none (0: not at all). It returns them
// and the ID to read after next: the last one's, or after (as "$"
// resolved) when none came.
func (s *Store) ReadEvents(ctx context.Context, shard int, after string, count int, block time.Duration) ([]redis.XMessage, string, error) {
	key := s.shards[shard].Events
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
	var out []redis.XMessage
	for _, st := range res {
		out = append(out, st.Messages...)
	}
	if len(out) > 0 {
		after = out[len(out)-1].ID
	}
	return out, after, nil
}

// DueHead reads the earliest score of shard's due index (ms); ok is false
// when the index holds no owner (IndexAnchor, at +inf, is none).
func (s *Store) DueHead(ctx context.Context, shard int) (score int64, ok bool, err error) {
	head, err := s.rdb.ZRangeWithScores(ctx, s.shards[shard].Due, 0, 0).Result()
	if err != nil || len(head) != 1 || math.IsInf(head[0].Score, 0) {
		return 0, false, err
	}
	return int64(head[0].Score), true, nil
}
