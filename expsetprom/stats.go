package expsetprom

import (
	"context"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/expset/expset"
	"github.com/prometheus/client_golang/prometheus"
)

// StatsCollector is a prometheus.Collector that reads a set's state from
// Redis on every scrape: Set.Stats, one gauge sample per shard and metric,
// labelled set and shard; then Set.Groups, one sample per consumer group
// and metric, labelled set and group (none for a set without expiry
// events). It is the view from outside (what waits in Redis), where
// Collector is the view from inside the processes (what they did); their
// metric names do not collide, so both can feed one Prometheus. A failed
// read fails the scrape (promhttp answers 500 and the error names the set).
// It is safe for simultaneous use by multiple goroutines; create one with
// NewStatsCollector, one per set (several may be registered on one
// registry).
//
// Metrics (namespace "expset" unless WithNamespace says otherwise):
//
//	expset_shard_owners{set,shard}               owners in the due index (every owner with members, plus stale entries)
//	expset_shard_owners_due{set,shard}           owners with a member past its deadline: the next sweep's work
//	expset_shard_members_due{set,shard}          expired members not yet swept (over the first 1000 due owners)
//	expset_shard_jobs_due{set,shard}             jobs (Set.Put) and schedule ticks due, not yet swept (same count)
//	expset_shard_members_due_partial{set,shard}  1 when more owners are due than members_due counted over
//	expset_shard_lag_seconds{set,shard}          now minus the oldest unswept deadline (0 when nothing is due)
//	expset_shard_events{set,shard}               expiry events in the stream, pending ones included
//	expset_shard_pending{set,shard}              events delivered and not yet acknowledged
//	expset_shard_retries_scheduled{set,shard}    pending events whose handler call failed, waiting for their retry delay
//	expset_shard_dead_letters{set,shard}         events that failed every attempt
//	expset_shard_events_trimmed{set,shard}       events retention removed before every group had them, ever
//	expset_shard_lease_held{set,shard}           1 when a sweeper holds the shard's lease
//	expset_shard_stalled{set,shard}              1 when work is due on the shard and no sweeper runs
//	expset_shard_server_evicted_keys{set,shard}  keys the maxmemory-policy of the shard's server evicted, any set's
//	expset_group_lag{set,group}                  events the group has not read yet (up to 1000 per shard where Redis cannot tell)
//	expset_group_pending{set,group}              events the group read and has not acknowledged
//	expset_group_retries_scheduled{set,group}    the group's pending events waiting for their retry delay
//	expset_group_dead_letters{set,group}         the group's dead letters, buried ones included
//	expset_group_running{set,group}              handler calls under way, of members and jobs
//	expset_group_running_owners{set,group}       the owners of those calls
//	expset_group_oldest_running_seconds{set,group}  how long the oldest of them has run (0 when none)
//	expset_group_held_back{set,group}            pending events no call has and no retry waits for (set aside at an owner cap or by a pause, or not yet begun)
//	expset_group_paused{set,group}               1 while the group is paused (Set.Pause), else 0
//	expset_group_paused_owners{set,group}        owners paused in the group
//
// Stats is read before Groups, not atomically with it: an event buried
// between the two reads counts in its group's dead letters and not yet in
// its shard's. A group name that is not valid UTF-8 is given Go-quoted in
// the group label. Set.Groups reads every dead letter to learn its group,
// one round trip per 1000 of the largest dead-letter stream: with millions
// of them, raise WithStatsTimeout or delete the ones handled.
type StatsCollector struct {
	set         *expset.Set
	timeout     time.Duration
	shards      []gauge[expset.ShardStats]
	groups      []gauge[expset.GroupInfo]
	statsFailed *prometheus.Desc
	groupFailed *prometheus.Desc
}

// gauge is one gauge and how to read its value from a T (a ShardStats or a
// GroupInfo).
type gauge[T any] struct {
	desc  *prometheus.Desc
	value func(T) float64
}

// DefaultStatsTimeout bounds the reads of one scrape (Set.Stats and
// Set.Groups) unless WithStatsTimeout says otherwise.
const DefaultStatsTimeout = 10 * time.Second

// NewStatsCollector returns a collector over set's Stats and Groups. It
// honours WithNamespace and WithStatsTimeout; other options do not apply to
// it.
func NewStatsCollector(set *expset.Set, opts ...Option) *StatsCollector {
	cfg := newConfig(opts)
	labels := prometheus.Labels{"set": set.Name()}
	desc := func(subsystem, name, help string, label ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, subsystem, name), help, label, labels)
	}
	shard := func(name, help string, value func(expset.ShardStats) float64) gauge[expset.ShardStats] {
		return gauge[expset.ShardStats]{desc: desc("shard", name, help, "shard"), value: value}
	}
	group := func(name, help string, value func(expset.GroupInfo) int64) gauge[expset.GroupInfo] {
		return gauge[expset.GroupInfo]{desc: desc("group", name, help, "group"),
			value: func(g expset.GroupInfo) float64 { return float64(value(g)) }}
	}
	return &StatsCollector{
		set:         set,
		timeout:     cfg.statsTimeout,
		statsFailed: desc("shard", "stats", "Set.Stats of the set."),
		groupFailed: desc("group", "groups", "Set.Groups of the set."),
		shards: []gauge[expset.ShardStats]{
			shard("owners", "Owners in the shard's due index: every owner holding members, plus stale entries.",
				func(s expset.ShardStats) float64 { return float64(s.Owners) }),
			shard("owners_due", "Owners with a member past its deadline: the ones the next sweep visits.",
				func(s expset.ShardStats) float64 { return float64(s.OwnersDue) }),
			shard("members_due", "Expired members no sweeper has removed yet (counted over the first 1000 due owners).",
				func(s expset.ShardStats) float64 { return float64(s.MembersDue) }),
			shard("jobs_due", "Jobs (Set.Put) and schedule ticks due that no sweeper has turned into events yet (counted over the same entries as members_due).",
				func(s expset.ShardStats) float64 { return float64(s.JobsDue) }),
			shard("members_due_partial", "1 when more owners are due than members_due was counted over, else 0.",
				func(s expset.ShardStats) float64 { return bit(s.Partial) }),
			shard("lag_seconds", "How long ago the oldest unswept deadline passed: how far behind the sweeper is (0 when nothing is due).",
				func(s expset.ShardStats) float64 {
					if s.OldestDue.IsZero() {
						return 0
					}
					return max(s.Now.Sub(s.OldestDue).Seconds(), 0)
				}),
			shard("events", "Expiry events in the shard's stream: waiting for a consumer, or delivered and not yet acknowledged.",
				func(s expset.ShardStats) float64 { return float64(s.Events) }),
			shard("pending", "Expiry events delivered to a consumer and not yet acknowledged.",
				func(s expset.ShardStats) float64 { return float64(s.Pending) }),
			shard("retries_scheduled", "Expiry events whose handler call failed, waiting for their retry delay (part of pending).",
				func(s expset.ShardStats) float64 { return float64(s.Retrying) }),
			shard("dead_letters", "Expiry events that failed every attempt and wait in the dead-letter stream.",
				func(s expset.ShardStats) float64 { return float64(s.Dead) }),
			shard("events_trimmed", "Expiry events the stream retention removed before every consumer group had them, since the shard began.",
				func(s expset.ShardStats) float64 { return float64(s.Trimmed) }),
			shard("lease_held", "1 when a sweeper holds the shard's lease, else 0.",
				func(s expset.ShardStats) float64 { return bit(s.Leased) }),
			shard("stalled", "1 when work is due on the shard and no sweeper runs to deliver it (a Sweeper.Run, or a Consume or Reserve without WithoutSweeper), else 0.",
				func(s expset.ShardStats) float64 { return bit(s.Stalled) }),
			shard("server_evicted_keys", "Keys the maxmemory-policy of the server holding the shard evicted since it started, any set's (INFO evicted_keys): above 0, members may be lost.",
				func(s expset.ShardStats) float64 { return float64(s.EvictedKeys) }),
		},
		groups: []gauge[expset.GroupInfo]{
			group("lag", "Expiry events the consumer group has not read yet, over the shards (counted up to 1000 per shard where Redis cannot tell).",
				func(g expset.GroupInfo) int64 { return g.Lag }),
			group("pending", "Expiry events the consumer group read and has not acknowledged yet.",
				func(g expset.GroupInfo) int64 { return g.Pending }),
			group("retries_scheduled", "The group's events whose handler call failed, waiting for their retry delay (part of pending).",
				func(g expset.GroupInfo) int64 { return g.Retrying }),
			group("dead_letters", "The group's events that failed every attempt or were buried, waiting in the dead-letter streams.",
				func(g expset.GroupInfo) int64 { return g.Dead }),
			group("running", "Handler calls of the group under way, of members and of jobs.",
				func(g expset.GroupInfo) int64 { return g.Running }),
			group("running_owners", "Owners with handler calls of the group under way (a job has none).",
				func(g expset.GroupInfo) int64 { return g.RunningOwners }),
			{desc: desc("group", "oldest_running_seconds", "How long the group's oldest handler call under way has run, by its consumer's clock (0 when none runs).", "group"),
				value: func(g expset.GroupInfo) float64 {
					if g.OldestRunning.IsZero() {
						return 0
					}
					return max(time.Since(g.OldestRunning).Seconds(), 0)
				}},
			group("held_back", "The group's pending events no handler call has and no retry waits for: set aside because their owner is at its cap (WithOwnerConcurrency) or by a pause, or read and not yet begun. Not slow handlers.",
				func(g expset.GroupInfo) int64 { return g.HeldBack }),
			{desc: desc("group", "paused", "1 while the consumer group is paused (Set.Pause): no handler call of it begins; else 0.", "group"),
				value: func(g expset.GroupInfo) float64 { return bit(g.Paused) }},
			group("paused_owners", "Owners paused in the consumer group (Set.Pause): no handler call of theirs begins.",
				func(g expset.GroupInfo) int64 { return g.PausedOwners }),
		},
	}
}

// Describe implements prometheus.Collector.
func (c *StatsCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.shards)
	describe(ch, c.groups)
}

// Collect implements prometheus.Collector: it reads the set's Stats, then
// its Groups, bounded together by the collector's timeout, and sends one
// sample per shard and gauge, then per group and gauge; a failed read sends
// an invalid metric carrying the error instead, and ends the scrape's
// samples.
func (c *StatsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.set.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.statsFailed, err)
		return
	}
	collect(ch, c.shards, st, func(s expset.ShardStats) string { return strconv.Itoa(s.Shard) })
	gs, err := c.set.Groups(ctx)
	switch {
	case errors.Is(err, expset.ErrInvalidArgument):
		// Groups refuses this way only a set without expiry events (one
		// that Open did not return failed Stats already): no groups.
	case err != nil:
		ch <- prometheus.NewInvalidMetric(c.groupFailed, err)
	default:
		collect(ch, c.groups, gs, func(g expset.GroupInfo) string { return labelValue(g.Name) })
	}
}

// describe sends the Desc of each of gauges.
func describe[T any](ch chan<- *prometheus.Desc, gauges []gauge[T]) {
	for _, g := range gauges {
		ch <- g.desc
	}
}

// collect sends one sample per gauge and item of xs, labelled label(x).
func collect[T any](ch chan<- prometheus.Metric, gauges []gauge[T], xs []T, label func(T) string) {
	for _, g := range gauges {
		for _, x := range xs {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(x), label(x))
		}
	}
}

// labelValue returns s as a label value: s itself when it is valid UTF-8,
// as Prometheus requires, else s Go-quoted ("\xff").
func labelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strconv.Quote(s)
}

// bit is 1 for true and 0 for false.
func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
