package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// consumer_reads.go holds the consumer engine's plain reads: new events of
// the shards with the pending counts of the safety poll (XREADGROUP,
// XPENDING), and the retries waiting (XPENDING).

// ShardRead is one shard's part of ReadNew.
type ShardRead struct {
	Shard   int
	Count   int  // the most new events to read; 0: none
	Pending bool // also count the group's entries pending there
}

// ShardNews is what ReadNew read of one shard.
type ShardNews struct {
	Entries []redis.XMessage // the new events, in stream order
	Pending int64            // the group's entries pending (ShardRead.Pending)
	// Err is the read's error, else the count's, as "expset: read
	// <stream>: ..." (NOGROUP when the stream or the group is missing:
	// IsNoGroup). Nothing new, or nothing pending, is no error.
	Err error
}

// ReadNew reads, for consumer of group, up to Count new events of each
// shard of reads (XREADGROUP ... >, which makes them pending for consumer
// and charges no attempt), and counts the group's entries pending on those
// with Pending (XPENDING), all in one pipeline. It returns one ShardNews
// per ShardRead, in order.
func (s *Store) ReadNew(ctx context.Context, group, consumer string, reads []ShardRead) []ShardNews {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(reads))
	pending := make([]*redis.XPendingCmd, len(reads))
	for k, r := range reads {
		events := s.shards[r.Shard].Events
		if r.Count > 0 {
			cmds[k] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: group, Consumer: consumer, Streams: []string{events, ">"},
				Count: int64(r.Count), Block: -1,
			})
		}
		if r.Pending {
			pending[k] = pipe.XPending(ctx, events, group)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	out := make([]ShardNews, len(reads))
	for k, r := range reads {
		var err error
		if cmds[k] != nil {
			var res []redis.XStream
			res, err = cmds[k].Result()
			for _, st := range res {
				out[k].Entries = append(out[k].Entries, st.Messages...)
			}
		}
		if errors.Is(err, redis.Nil) {
			err = nil // nothing new
		}
		if pending[k] != nil && err == nil {
			var p *redis.XPending
			p, err = pending[k].Result()
			if errors.Is(err, redis.Nil) {
				p, err = &redis.XPending{}, nil
			}
			if err == nil {
				out[k].Pending = p.Count
			}
		}
		if err != nil {
			out[k] = ShardNews{Err: fmt.Errorf("expset: read %s: %w", s.shards[r.Shard].Events, err)}
		}
	}
	return out
}

// GroupShard names one consumer group on one shard's stream.
type GroupShard struct {
	Group string
	Shard int
}

// Retrying counts, for each of qs, the entries its group holds pending on
// its shard's stream under RetryHolder: the events waiting for their retry
// delay. One pipelined XPENDING (summary form) per query, one round trip
// (one per node on a cluster), none for no query. A stream or group
// deleted meanwhile counts 0.
func (s *Store) Retrying(ctx context.Context, qs []GroupShard) ([]int64, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XPendingCmd, len(qs))
	for i, q := range qs {
		cmds[i] = pipe.XPending(ctx, s.shards[q.Shard].Events, q.Group)
	}
	_, _ = pipe.Exec(ctx) // read per command
	out := make([]int64, len(qs))
	for i, c := range cmds {
		p, err := c.Result()
		switch {
		case err == nil:
			out[i] = p.Consumers[RetryHolder]
		case errors.Is(err, redis.Nil) || IsNoGroup(err):
		default:
			return nil, fmt.Errorf("expset: retries of group %q on %s: %w", qs[i].Group, s.shards[qs[i].Shard].Events, err)
		}
	}
	return out, nil
}
