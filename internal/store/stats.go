package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// stats.go reads what Set.Stats reports of each shard: its due index, its
// streams, its retention counter and its groups' pending counts.

// statsOwnerScan is the most due owners whose expired members Stats
// counts per shard.
const statsOwnerScan = 1000

// ShardCounts is what Counts reads of one shard at a given now.
type ShardCounts struct {
	Owners     int64 // owners in the due index
	OwnersDue  int64 // index entries due at now
	MembersDue int64 // expired members, over the first statsOwnerScan due owners
	Partial    bool  // more than statsOwnerScan owners are due
	OldestDue  time.Time
	Events     int64 // entries of the event stream
	Dead       int64 // entries of the dead-letter stream
	Trimmed    int64 // the retention counter
	// Groups are the stream's groups and their pending counts; nil when
	// they could not be read (no stream).
	Groups []GroupStat
}

// statsShardCmds are one shard's commands of the first pipeline.
type statsShardCmds struct {
	owners, ownersDue, events, dead *redis.IntCmd
	due                             *redis.StringSliceCmd
	trimmed                         *redis.StringCmd
}

// statsOwnerCmds are one due owner's commands of the second pipeline.
type statsOwnerCmds struct {
	count *redis.IntCmd
	first *redis.ZSliceCmd
}

// Now returns the set's now in ms: the injected clock's, or the server's
// TIME.
func (s *Store) Now(ctx context.Context) (int64, error) {
	if s.clock != nil {
		return s.clock().UnixMilli(), nil
	}
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("expset: stats of %q: %w", s.name, err)
	}
	return t.UnixMilli(), nil
}

// Counts reads every shard's counts at now (ms), in two pipelines (each one
// round trip per server).
func (s *Store) Counts(ctx context.Context, now int64) ([]ShardCounts, error) {
	nowArg := strconv.FormatInt(now, 10)
	cmds, err := s.statsCounts(ctx, nowArg)
	if err != nil {
		return nil, err
	}
	owners, groups := s.statsDueOwners(ctx, cmds, nowArg)
	out := make([]ShardCounts, len(s.shards))
	for i := range s.shards {
		c := ShardCounts{
			Owners:    cmds[i].owners.Val(),
			OwnersDue: cmds[i].ownersDue.Val(),
			Events:    cmds[i].events.Val(),
			Dead:      cmds[i].dead.Val(),
			Trimmed:   counter(cmds[i].trimmed),
		}
		c.Partial = c.OwnersDue > statsOwnerScan
		if err := s.addMembersDue(&c, i, owners[i], now); err != nil {
			return nil, err
		}
		if g := groups[i]; g.Err() == nil {
			for _, x := range g.Val() {
				c.Groups = append(c.Groups, GroupStat{Name: x.Name, Pending: x.Pending})
			}
		}
		out[i] = c
	}
	return out, nil
}

// statsCounts sends the first pipeline: each shard's index size, its
// entries due (and the first statsOwnerScan of them), its streams' lengths
// and its retention counter.
func (s *Store) statsCounts(ctx context.Context, nowArg string) ([]statsShardCmds, error) {
	cmds := make([]statsShardCmds, len(s.shards))
	pipe := s.rdb.Pipeline()
	for i, sk := range s.shards {
		cmds[i] = statsShardCmds{
			owners:    pipe.ZCard(ctx, sk.Due),
			ownersDue: pipe.ZCount(ctx, sk.Due, "-inf", nowArg),
			due:       pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: sk.Due, Start: "-inf", Stop: nowArg, ByScore: true, Count: statsOwnerScan}),
			events:    pipe.XLen(ctx, sk.Events),
			dead:      pipe.XLen(ctx, sk.Dead),
			trimmed:   pipe.Get(ctx, sk.Trimmed),
		}
	}
	_, _ = pipe.Exec(ctx)
	for i := range cmds {
		c := &cmds[i]
		for _, cmd := range []redis.Cmder{c.owners, c.ownersDue, c.due, c.events, c.dead, c.trimmed} {
			if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("expset: stats of %q: %w", s.name, err)
			}
		}
	}
	return cmds, nil
}

// statsDueOwners sends the second pipeline: each due owner's expired
// members and first deadline, and each shard's groups.
func (s *Store) statsDueOwners(ctx context.Context, cmds []statsShardCmds, nowArg string) ([][]statsOwnerCmds, []*redis.XInfoGroupsCmd) {
	owners := make([][]statsOwnerCmds, len(s.shards))
	groups := make([]*redis.XInfoGroupsCmd, len(s.shards))
	pipe := s.rdb.Pipeline()
	for i, sk := range s.shards {
		for _, o := range cmds[i].due.Val() {
			owners[i] = append(owners[i], statsOwnerCmds{
				count: pipe.ZCount(ctx, sk.Owner+o, "-inf", nowArg),
				first: pipe.ZRangeWithScores(ctx, sk.Owner+o, 0, 0),
			})
		}
		groups[i] = pipe.XInfoGroups(ctx, sk.Events)
	}
	_, _ = pipe.Exec(ctx)
	return owners, groups
}

// addMembersDue adds the expired members of shard's due owners to c, and
// the earliest deadline among them.
func (s *Store) addMembersDue(c *ShardCounts, shard int, owners []statsOwnerCmds, now int64) error {
	for _, oc := range owners {
		if err := oc.count.Err(); err != nil {
			return fmt.Errorf("expset: stats of %q, shard %d (%s): %w", s.name, shard, s.shards[shard].Due, err)
		}
		c.MembersDue += oc.count.Val()
		if z := oc.first.Val(); len(z) == 1 && int64(z[0].Score) <= now {
			if d := msTime(int64(z[0].Score)); c.OldestDue.IsZero() || d.Before(c.OldestDue) {
				c.OldestDue = d
			}
		}
	}
	return nil
}

// counter reads a counter's value, 0 when it is missing.
func counter(c *redis.StringCmd) int64 {
	n, err := c.Int64()
	if err != nil {
		return 0
	}
	return n
}
