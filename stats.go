package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// StatsOwnerScan is how many due owners of a shard Stats reads to count the
// members due; with more due, ShardStats.Partial is set.
const StatsOwnerScan = 1000

// ShardStats describes one shard, for operators (the CLI's `expset stats`).
// A shard with 1200 owners indexed, 3 of them holding 7 expired members the
// sweeper has not reached yet, the oldest 2s overdue, reports Owners=1200,
// OwnersDue=3, MembersDue=7 and OldestDue two seconds before Now.
type ShardStats struct {
	Shard      int
	Now        time.Time // the "now" the numbers are taken at (server TIME or WithClock)
	Owners     int64     // owners in the due index: every owner with members, plus stale entries
	OwnersDue  int64     // index entries due now: owners the next sweep will visit
	MembersDue int64     // expired members not yet swept, counted over the first 1000 due owners
	Partial    bool      // more than 1000 owners are due: MembersDue counts only the first 1000's
	OldestDue  time.Time // the earliest deadline among those members; zero when none
	Events     int64     // expiry events in the stream: not yet handled, or pending
	Pending    int64     // events delivered and not yet acknowledged, over all consumer groups
	Dead       int64     // dead letters
	Trimmed    int64     // events retention removed before every group had them, ever (WithEventRetention)
	Leased     bool      // a sweeper holds the shard's lease
}

// Stats returns the state of every shard. The numbers of one shard are read
// together but not atomically, and shards one after another.
func (s *Set) Stats(ctx context.Context) ([]ShardStats, error) {
	if err := s.opened(); err != nil {
		return nil, err
	}
	now, err := s.statsNow(ctx)
	if err != nil {
		return nil, err
	}
	nowArg := strconv.FormatInt(now, 10)
	type shardCmds struct {
		owners, ownersDue, events, dead, leased *redis.IntCmd
		due                                     *redis.StringSliceCmd
		trimmed                                 *redis.StringCmd
	}
	cmds := make([]shardCmds, len(s.shards))
	pipe := s.rdb.Pipeline()
	for i, sk := range s.shards {
		cmds[i] = shardCmds{
			owners:    pipe.ZCard(ctx, sk.due),
			ownersDue: pipe.ZCount(ctx, sk.due, "-inf", nowArg),
			due:       pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: sk.due, Start: "-inf", Stop: nowArg, ByScore: true, Count: StatsOwnerScan}),
			events:    pipe.XLen(ctx, sk.events),
			dead:      pipe.XLen(ctx, sk.dead),
			leased:    pipe.Exists(ctx, sk.lease),
			trimmed:   pipe.Get(ctx, sk.trimmed),
		}
	}
	// A missing counter answers redis.Nil, which Exec may report instead of
	// another command's error: check each command.
	_, _ = pipe.Exec(ctx)
	for i := range cmds {
		c := &cmds[i]
		for _, cmd := range []redis.Cmder{c.owners, c.ownersDue, c.due, c.events, c.dead, c.leased, c.trimmed} {
			if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("expset: stats of %q: %w", s.name, err)
			}
		}
	}

	// Second round: members due of the due owners, and the groups' pending
	// counts of streams that exist.
	type ownerCmds struct {
		count *redis.IntCmd
		first *redis.ZSliceCmd
	}
	owners := make([][]ownerCmds, len(s.shards))
	groups := make([]*redis.XInfoGroupsCmd, len(s.shards))
	pipe = s.rdb.Pipeline()
	for i, sk := range s.shards {
		for _, o := range cmds[i].due.Val() {
			owners[i] = append(owners[i], ownerCmds{
				count: pipe.ZCount(ctx, sk.owner+o, "-inf", nowArg),
				first: pipe.ZRangeWithScores(ctx, sk.owner+o, 0, 0),
			})
		}
		groups[i] = pipe.XInfoGroups(ctx, sk.events)
	}
	_, _ = pipe.Exec(ctx) // a missing stream fails its XINFO: read per command

	out := make([]ShardStats, len(s.shards))
	for i := range s.shards {
		st := ShardStats{
			Shard:     i,
			Now:       msTime(now),
			Owners:    cmds[i].owners.Val(),
			OwnersDue: cmds[i].ownersDue.Val(),
			Events:    cmds[i].events.Val(),
			Dead:      cmds[i].dead.Val(),
			Trimmed:   counter(cmds[i].trimmed),
			Leased:    cmds[i].leased.Val() == 1,
		}
		st.Partial = st.OwnersDue > StatsOwnerScan
		for _, oc := range owners[i] {
			if err := oc.count.Err(); err != nil {
				return nil, fmt.Errorf("expset: stats of %q, shard %d (%s): %w", s.name, i, s.shards[i].due, err)
			}
			st.MembersDue += oc.count.Val()
			if z := oc.first.Val(); len(z) == 1 && int64(z[0].Score) <= now {
				if d := msTime(int64(z[0].Score)); st.OldestDue.IsZero() || d.Before(st.OldestDue) {
					st.OldestDue = d
				}
			}
		}
		if g := groups[i]; g.Err() == nil {
			for _, x := range g.Val() {
				st.Pending += x.Pending
			}
		}
		out[i] = st
	}
	return out, nil
}

// counter reads a counter's GET: 0 when it does not exist (or holds
// something other than an integer).
func counter(c *redis.StringCmd) int64 {
	n, err := c.Int64()
	if err != nil {
		return 0
	}
	return n
}

// statsNow returns now in ms: the set's clock, or the server's TIME.
func (s *Set) statsNow(ctx context.Context) (int64, error) {
	if s.clock != nil {
		return s.clock().UnixMilli(), nil
	}
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("expset: stats of %q: %w", s.name, err)
	}
	return t.UnixMilli(), nil
}
