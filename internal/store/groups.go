package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// groups.go reads and creates the consumer groups of the shards' event
// streams (Set.Groups, Open's WithConsumerGroups, Consume and Reserve).

// groupLagCount is the most events counted per shard as a group's lag
// where Redis cannot tell it.
const groupLagCount = 1000

// GroupStat is one consumer group of one shard's stream: its events
// pending (read and not acknowledged) and its lag (not yet read; where
// Redis cannot tell, counted up to groupLagCount).
type GroupStat struct {
	Name    string
	Pending int64
	Lag     int64
}

// Groups reads every shard's consumer groups (XINFO GROUPS, one pipeline,
// then one more for the lags Redis cannot tell), by shard. A shard without
// a stream has none.
func (s *Store) Groups(ctx context.Context) ([][]GroupStat, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XInfoGroupsCmd, len(s.shards))
	for i, sk := range s.shards {
		cmds[i] = pipe.XInfoGroups(ctx, sk.Events)
	}
	_, _ = pipe.Exec(ctx) // a missing stream fails its XINFO: read per command
	out := make([][]GroupStat, len(s.shards))
	type unknownLag struct {
		g   *GroupStat
		cmd *redis.XMessageSliceCmd
	}
	var lags []unknownLag
	pipe = s.rdb.Pipeline()
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if redis.HasErrorPrefix(err, "no such key") || redis.HasErrorPrefix(err, "ERR no such key") {
				continue
			}
			return nil, fmt.Errorf("expset: groups of %s: %w", s.shards[i].Events, err)
		}
		out[i] = make([]GroupStat, len(c.Val()))
		for j, x := range c.Val() {
			g := &out[i][j]
			*g = GroupStat{Name: x.Name, Pending: x.Pending}
			if x.Lag >= 0 && x.EntriesRead > 0 {
				g.Lag = x.Lag
			} else {
				lags = append(lags, unknownLag{g, pipe.XRangeN(ctx, s.shards[i].Events, "("+x.LastDeliveredID, "+", groupLagCount)})
			}
		}
	}
	if len(lags) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("expset: groups of %q: %w", s.name, err)
		}
		for _, l := range lags {
			l.g.Lag += int64(len(l.cmd.Val()))
		}
	}
	return out, nil
}

// DeadByGroup counts every shard's dead letters by the group that buried
// them, reading the dead-letter streams MaxBatch entries at a time, in one
// pipeline per round.
func (s *Store) DeadByGroup(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	from := make([]string, len(s.shards))
	for i := range from {
		from[i] = "-"
	}
	for {
		pipe := s.rdb.Pipeline()
		cmds := map[int]*redis.XMessageSliceCmd{}
		for i, f := range from {
			if f != "" {
				cmds[i] = pipe.XRangeN(ctx, s.shards[i].Dead, f, "+", MaxBatch)
			}
		}
		if len(cmds) == 0 {
			return out, nil
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("expset: dead letters of %q: %w", s.name, err)
		}
		for i, c := range cmds {
			msgs := c.Val()
			for _, m := range msgs {
				name, _ := m.Values["g"].(string)
				out[name]++
			}
			from[i] = ""
			if len(msgs) == MaxBatch {
				from[i] = "(" + msgs[len(msgs)-1].ID
			}
		}
	}
}

// CreateGroups creates groups on shard's stream (and the stream), each
// from its start; a group there already is left as it is.
func (s *Store) CreateGroups(ctx context.Context, shard int, groups []string) error {
	key := s.shards[shard].Events
	for _, g := range groups {
		err := s.rdb.XGroupCreateMkStream(ctx, key, g, "0").Err()
		if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return fmt.Errorf("expset: create group %q on %s: %w", g, key, err)
		}
	}
	return nil
}

// DeclareGroups creates groups on every shard's stream (and the streams),
// in one pipeline; a group there already is left as it is.
func (s *Store) DeclareGroups(ctx context.Context, groups []string) error {
	pipe := s.rdb.Pipeline()
	for _, sk := range s.shards {
		for _, g := range groups {
			pipe.XGroupCreateMkStream(ctx, sk.Events, g, "0")
		}
	}
	cmds, _ := pipe.Exec(ctx)
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return fmt.Errorf("expset: open %q: create consumer group: %w", s.name, err)
		}
	}
	return nil
}
