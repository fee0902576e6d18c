package expset

import (
	"context"
	"fmt"
	"time"
)

// Stats: the state of each shard, for operators (the CLI's `expset stats`,
// expsetprom's collector).

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
	OldestDue  time.Time // the earliest deadline among those members and jobs (Now.Sub(OldestDue): how long it is overdue); zero when none
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
	now, err := s.st.Now(ctx)
	if err != nil {
		return nil, err
	}
	reg, err := s.sweepers(ctx, "", -1)
	if err != nil {
		return nil, fmt.Errorf("expset: stats of %q: %w", s.name, err)
	}
	counts, err := s.st.Counts(ctx, now)
	if err != nil {
		return nil, err
	}
	evicted, err := s.evictedKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ShardStats, len(s.shards))
	var retrying []retryCount
	for i, c := range counts {
		out[i] = ShardStats{
			Shard:      i,
			Now:        msTime(now),
			Owners:     c.Owners,
			OwnersDue:  c.OwnersDue,
			MembersDue: c.MembersDue,
			JobsDue:    c.JobsDue,
			Partial:    c.Partial,
			OldestDue:  c.OldestDue,
			Events:     c.Events,
			Dead:       c.Dead,
			Trimmed:    c.Trimmed,
			Leased:     holder(reg.Tokens, i) != "",
			Stalled:    c.EntriesDue > 0 && holder(reg.Tokens, i) == "",

			EvictedKeys: evicted[i],

			EventsKey:      s.shards[i].Events,
			DeadLettersKey: s.shards[i].Dead,
		}
		for _, g := range c.Groups {
			out[i].Pending += g.Pending
			if g.Pending > 0 {
				retrying = append(retrying, retryCount{i, g.Name, &out[i].Retrying})
			}
		}
	}
	if err := s.countRetrying(ctx, retrying); err != nil {
		return nil, err
	}
	return out, nil
}
