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
// streams, its retention counter and its groups' pending counts. The owners
// the jobs of Set.Put and the schedules' ticks are kept under (jobs.go) are
// not counted as owners: their due members count as jobs.

// statsOwnerScan is the most due owners whose expired members Stats
// counts per shard.
const statsOwnerScan = 1000

// ShardCounts is what Counts reads of one shard at a given now.
type ShardCounts struct {
	Owners     int64     // owners in the due index, the job owners left out
	OwnersDue  int64     // of them, those due at now
	EntriesDue int64     // entries of the due index due at now, the job owners included
	MembersDue int64     // expired members, over the first statsOwnerScan due entries
	JobsDue    int64     // due jobs and schedule ticks, over the same entries
	Partial    bool      // more than statsOwnerScan entries are due
	OldestDue  time.Time // the earliest deadline among those members and jobs; zero when none
	Events     int64     // entries of the event stream
	Dead       int64     // entries of the dead-letter stream
	Trimmed    int64     // the retention counter
	// Groups are the stream's groups and their pending counts; nil when
	// they could not be read (no stream).
	Groups []GroupStat
}

// statsShardCmds are one shard's commands of the first pipeline.
type statsShardCmds struct {
	owners, ownersDue, events, dead *redis.IntCmd
	due                             *redis.StringSliceCmd
	trimmed                         *redis.StringCmd
	jobs                            *redis.Cmd // ZMSCORE of the job owners (jobOwners) and IndexAnchor in the due index
}

// statsOwnerCmds are one due owner's commands of the second pipeline.
type statsOwnerCmds struct {
	job   bool // a job bucket or the schedules' owner
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
// round trip per server; the first asks each shard's due index, with one
// ZMSCORE, for the owners jobs and schedules are kept under and for
// IndexAnchor, to leave them out of the owners).
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
			EntriesDue: cmds[i].ownersDue.Val(),
			Events:     cmds[i].events.Val(),
			Dead:       cmds[i].dead.Val(),
			Trimmed:    counter(cmds[i].trimmed),
		}
		c.Partial = c.EntriesDue > statsOwnerScan
		// Read beside the counts, not atomically with them: never below 0.
		jobs, jobsDue := jobOwnersIn(cmds[i].jobs.Val(), now)
		c.Owners = max(cmds[i].owners.Val()-jobs, 0)
		c.OwnersDue = max(c.EntriesDue-jobsDue, 0)
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
	jobs := append(s.jobOwners(), IndexAnchor)
	pipe := s.rdb.Pipeline()
	for i, sk := range s.shards {
		cmds[i] = statsShardCmds{
			owners:    pipe.ZCard(ctx, sk.Due),
			ownersDue: pipe.ZCount(ctx, sk.Due, "-inf", nowArg),
			due:       pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: sk.Due, Start: "-inf", Stop: nowArg, ByScore: true, Count: statsOwnerScan}),
			events:    pipe.XLen(ctx, sk.Events),
			dead:      pipe.XLen(ctx, sk.Dead),
			trimmed:   pipe.Get(ctx, sk.Trimmed),
			jobs:      pipe.Do(ctx, append([]any{"ZMSCORE", sk.Due}, jobs...)...),
		}
	}
	_, _ = pipe.Exec(ctx)
	for i := range cmds {
		c := &cmds[i]
		for _, cmd := range []redis.Cmder{c.owners, c.ownersDue, c.due, c.events, c.dead, c.trimmed, c.jobs} {
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
				job:   IsJobOwner(o),
				count: pipe.ZCount(ctx, sk.Owner+o, "-inf", nowArg),
				first: pipe.ZRangeWithScores(ctx, sk.Owner+o, 0, 0),
			})
		}
		groups[i] = pipe.XInfoGroups(ctx, sk.Events)
	}
	_, _ = pipe.Exec(ctx)
	return owners, groups
}

// addMembersDue adds the expired members of shard's due owners to c (a job
// owner's to its JobsDue), and the earliest deadline among them.
func (s *Store) addMembersDue(c *ShardCounts, shard int, owners []statsOwnerCmds, now int64) error {
	for _, oc := range owners {
		if err := oc.count.Err(); err != nil {
			return fmt.Errorf("expset: stats of %q, shard %d (%s): %w", s.name, shard, s.shards[shard].Due, err)
		}
		if oc.job {
			c.JobsDue += oc.count.Val()
		} else {
			c.MembersDue += oc.count.Val()
		}
		if z := oc.first.Val(); len(z) == 1 && int64(z[0].Score) <= now {
			if d := msTime(int64(z[0].Score)); c.OldestDue.IsZero() || d.Before(c.OldestDue) {
				c.OldestDue = d
			}
		}
	}
	return nil
}

// jobOwnersIn counts, from the ZMSCORE of the job owners in a due index,
// those present and those due at now (ms).
func jobOwnersIn(reply any, now int64) (present, due int64) {
	scores, _ := reply.([]any)
	for _, v := range scores {
		var f float64
		switch x := v.(type) {
		case float64: // RESP3
			f = x
		case string: // RESP2
			f, _ = strconv.ParseFloat(x, 64)
		default:
			continue // nil: not in the index
		}
		present++
		if f <= float64(now) {
			due++
		}
	}
	return present, due
}

// counter reads a counter's value, 0 when it is missing.
func counter(c *redis.StringCmd) int64 {
	n, err := c.Int64()
	if err != nil {
		return 0
	}
	return n
}
