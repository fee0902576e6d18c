package expset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stats: the state of each shard, for operators (the CLI's `expset stats`,
// expsetprom's collector).

// statsOwnerScan is how many due owners of a shard Stats reads to count the
// members due; with more due, ShardStats.Partial is set.
const statsOwnerScan = 1000

// ShardStats describes one shard, for operators (the CLI's `expset stats`).
// A shard with 1200 owners indexed, 3 of them holding 7 expired members the
// sweeper has not reached yet, the oldest 2s overdue, reports Owners=1200,
// OwnersDue=3, MembersDue=7 and OldestDue two seconds before Now. The jobs
// of Set.Put and the ticks of schedules are kept under owners of their
// own, which are not counted as owners: the jobs and ticks due count in
// JobsDue.
type ShardStats struct {
	Shard      int
	Now        time.Time // the "now" the numbers are taken at (server TIME or WithClock)
	Owners     int64     // owners in the due index: every owner with members, plus stale entries
	OwnersDue  int64     // owners due now: owners the next sweep will visit
	MembersDue int64     // expired members not yet swept, counted over the first 1000 due index entries
	JobsDue    int64     // jobs (Set.Put) and schedule ticks due and not yet swept, counted over the same entries
	Partial    bool      // more than 1000 owners and job buckets are due: MembersDue and JobsDue count only the first 1000's
	OldestDue  time.Time // the earliest deadline among those members and jobs; zero when none
	// Stalled reports work due on the shard (an owner, a job or a tick)
	// and no sweeper alive on the set to sweep it: Leased is false. Nothing
	// of the shard is delivered until a Sweeper.Run, or a Consume or
	// Reserve without WithoutSweeper, runs in some process.
	Stalled  bool
	Events   int64 // expiry events in the stream: not yet handled, or pending
	Pending  int64 // events delivered and not yet acknowledged, over all consumer groups
	Dead     int64 // dead letters
	Retrying int64 // events whose handler call failed, waiting for their retry delay (WithRetryBackoff, RetryAfter), over all consumer groups
	Trimmed  int64 // events retention removed before every group had them, ever (WithEventRetention)
	Leased   bool  // a Sweeper.Run's lease gives it the shard (any Run alive holds every shard)
	// EvictedKeys is the evicted_keys count (INFO stats) of the server that
	// holds the shard: keys of any kind its maxmemory-policy evicted since it
	// started. Anything above 0 on a server of this set's keys means lost
	// members (see WithEvictingServer); 0 where the server does not say.
	EvictedKeys int64

	EventsKey      string // the Redis key of the shard's expiry event stream
	DeadLettersKey string // the Redis key of the shard's dead-letter stream
}

// Stats returns the state of every shard. The numbers of one shard are read
// together but not atomically, and shards one after another: TIME (unless
// WithClock), a read of the sweeper registry, two pipelines (each one round
// trip per node on a cluster; the first asks each shard's due index, with
// one ZMSCORE, for the 8,192/shards + 1 owners jobs and schedules are kept
// under), a third for Retrying when a group has events pending (an
// XPENDING per shard and such group), then INFO stats once per server for
// EvictedKeys.
func (s *Set) Stats(ctx context.Context) ([]ShardStats, error) {
	if err := s.opened(); err != nil {
		return nil, err
	}
	now, err := s.statsNow(ctx)
	if err != nil {
		return nil, err
	}
	reg, err := s.sweepers(ctx, "", -1)
	if err != nil {
		return nil, fmt.Errorf("expset: stats of %q: %w", s.name, err)
	}
	nowArg := strconv.FormatInt(now, 10)
	cmds, err := s.statsCounts(ctx, nowArg)
	if err != nil {
		return nil, err
	}
	owners, groups := s.statsDueOwners(ctx, cmds, nowArg)
	evicted, err := s.evictedKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ShardStats, len(s.shards))
	var retrying []retryCount
	for i := range s.shards {
		st := ShardStats{
			Shard:     i,
			Now:       msTime(now),
			Owners:    cmds[i].owners.Val(),
			OwnersDue: cmds[i].ownersDue.Val(),
			Events:    cmds[i].events.Val(),
			Dead:      cmds[i].dead.Val(),
			Trimmed:   counter(cmds[i].trimmed),
			Leased:    holder(reg.tokens, i) != "",

			EvictedKeys: evicted[i],

			EventsKey:      s.shards[i].events,
			DeadLettersKey: s.shards[i].dead,
		}
		st.Partial = st.OwnersDue > statsOwnerScan
		st.Stalled = st.OwnersDue > 0 && !st.Leased
		// Read beside the counts, not atomically with them: never below 0.
		jobs, jobsDue := jobOwnersIn(cmds[i].jobs, now)
		st.Owners = max(st.Owners-jobs, 0)
		st.OwnersDue = max(st.OwnersDue-jobsDue, 0)
		if err := s.addMembersDue(&st, owners[i], now); err != nil {
			return nil, err
		}
		out[i] = st
		if g := groups[i]; g.Err() == nil {
			for _, x := range g.Val() {
				out[i].Pending += x.Pending
				if x.Pending > 0 {
					retrying = append(retrying, retryCount{s.shards[i].events, x.Name, &out[i].Retrying})
				}
			}
		}
	}
	if err := s.countRetrying(ctx, retrying); err != nil {
		return nil, err
	}
	return out, nil
}

// statsShardCmds are the commands of Stats's first round for one shard.
type statsShardCmds struct {
	owners, ownersDue, events, dead *redis.IntCmd
	due                             *redis.StringSliceCmd
	trimmed                         *redis.StringCmd
	jobs                            *redis.Cmd // ZMSCORE of the job owners in the due index
}

// statsOwnerCmds are the commands of Stats's second round for one due owner.
type statsOwnerCmds struct {
	job   bool // a job bucket or the schedules' owner
	count *redis.IntCmd
	first *redis.ZSliceCmd
}

// jobOwnersIn counts, from the ZMSCORE of the job owners in a due index,
// those present and those due at now (ms).
func jobOwnersIn(c *redis.Cmd, now int64) (present, due int64) {
	scores, _ := c.Val().([]any)
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
		if int64(f) <= now {
			due++
		}
	}
	return present, due
}

// statsCounts runs Stats's first round, one pipeline: each shard's index
// sizes, its first statsOwnerScan due owners, stream lengths and trim
// counter.
func (s *Set) statsCounts(ctx context.Context, nowArg string) ([]statsShardCmds, error) {
	cmds := make([]statsShardCmds, len(s.shards))
	jobs := append([]any{"ZMSCORE", ""}, s.jobOwners()...)
	pipe := s.rdb.Pipeline()
	for i, sk := range s.shards {
		args := slices.Clone(jobs)
		args[1] = sk.due
		cmds[i] = statsShardCmds{
			owners:    pipe.ZCard(ctx, sk.due),
			ownersDue: pipe.ZCount(ctx, sk.due, "-inf", nowArg),
			due:       pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: sk.due, Start: "-inf", Stop: nowArg, ByScore: true, Count: statsOwnerScan}),
			events:    pipe.XLen(ctx, sk.events),
			dead:      pipe.XLen(ctx, sk.dead),
			trimmed:   pipe.Get(ctx, sk.trimmed),
			jobs:      pipe.Do(ctx, args...),
		}
	}
	// A missing counter answers redis.Nil, which Exec may report instead of
	// another command's error: check each command.
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

// statsDueOwners runs Stats's second round, one pipeline: the members due of
// the due owners, and the groups' pending counts of streams that exist. Its
// commands are read one by one: a missing stream fails its XINFO.
func (s *Set) statsDueOwners(ctx context.Context, cmds []statsShardCmds, nowArg string) ([][]statsOwnerCmds, []*redis.XInfoGroupsCmd) {
	owners := make([][]statsOwnerCmds, len(s.shards))
	groups := make([]*redis.XInfoGroupsCmd, len(s.shards))
	pipe := s.rdb.Pipeline()
	for i, sk := range s.shards {
		for _, o := range cmds[i].due.Val() {
			owners[i] = append(owners[i], statsOwnerCmds{
				job:   isJobOwner(o),
				count: pipe.ZCount(ctx, sk.owner+o, "-inf", nowArg),
				first: pipe.ZRangeWithScores(ctx, sk.owner+o, 0, 0),
			})
		}
		groups[i] = pipe.XInfoGroups(ctx, sk.events)
	}
	_, _ = pipe.Exec(ctx)
	return owners, groups
}

// addMembersDue adds the due owners' members (and jobs) due at now to st,
// and sets its OldestDue.
func (s *Set) addMembersDue(st *ShardStats, owners []statsOwnerCmds, now int64) error {
	for _, oc := range owners {
		if err := oc.count.Err(); err != nil {
			return fmt.Errorf("expset: stats of %q, shard %d (%s): %w", s.name, st.Shard, s.shards[st.Shard].due, err)
		}
		if oc.job {
			st.JobsDue += oc.count.Val()
		} else {
			st.MembersDue += oc.count.Val()
		}
		if z := oc.first.Val(); len(z) == 1 && int64(z[0].Score) <= now {
			if d := msTime(int64(z[0].Score)); st.OldestDue.IsZero() || d.Before(st.OldestDue) {
				st.OldestDue = d
			}
		}
	}
	return nil
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
