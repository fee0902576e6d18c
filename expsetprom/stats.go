package expsetprom

import (
	"context"
	"strconv"
	"time"

	"github.com/expset/expset"
	"github.com/prometheus/client_golang/prometheus"
)

// StatsCollector is a prometheus.Collector that reads a set's state from
// Redis with Set.Stats on every scrape: one gauge sample per shard and
// metric, labelled set and shard. It is the view from outside (what waits in
// Redis), where Collector is the view from inside the processes (what they
// did); their metric names do not collide, so both can feed one Prometheus.
// A failed read fails the scrape (promhttp answers 500 and the error names
// the set and the shard's key). It is safe for simultaneous use by multiple
// goroutines; create one with NewStatsCollector, one per set (several may be
// registered on one registry).
//
// Metrics (namespace "expset" unless WithNamespace says otherwise):
//
//	expset_shard_owners{set,shard}               owners in the due index (every owner with members, plus stale entries)
//	expset_shard_owners_due{set,shard}           owners with a member past its deadline: the next sweep's work
//	expset_shard_members_due{set,shard}          expired members not yet swept (over the first 1000 due owners)
//	expset_shard_members_due_partial{set,shard}  1 when more owners are due than members_due counted over
//	expset_shard_lag_seconds{set,shard}          now minus the oldest unswept deadline (0 when nothing is due)
//	expset_shard_events{set,shard}               expiry events in the stream, pending ones included
//	expset_shard_pending{set,shard}              events delivered and not yet acknowledged
//	expset_shard_dead_letters{set,shard}         events that failed every attempt
//	expset_shard_events_trimmed{set,shard}       events retention removed before every group had them, ever
//	expset_shard_lease_held{set,shard}           1 when a sweeper holds the shard's lease
type StatsCollector struct {
	set     *expset.Set
	timeout time.Duration
	gauges  []statsGauge
	failed  *prometheus.Desc
}

// statsGauge is one per-shard gauge and how to read it from ShardStats.
type statsGauge struct {
	desc  *prometheus.Desc
	value func(expset.ShardStats) float64
}

// DefaultStatsTimeout bounds one scrape's Set.Stats call unless
// WithStatsTimeout says otherwise.
const DefaultStatsTimeout = 10 * time.Second

// NewStatsCollector returns a collector over set's Stats. It honours
// WithNamespace and WithStatsTimeout; other options do not apply to it.
func NewStatsCollector(set *expset.Set, opts ...Option) *StatsCollector {
	cfg := newConfig(opts)
	labels := prometheus.Labels{"set": set.Name()}
	gauge := func(name, help string, value func(expset.ShardStats) float64) statsGauge {
		return statsGauge{
			desc:  prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "shard", name), help, []string{"shard"}, labels),
			value: value,
		}
	}
	return &StatsCollector{
		set:     set,
		timeout: cfg.statsTimeout,
		failed:  prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "shard", "stats"), "Set.Stats of the set.", nil, labels),
		gauges: []statsGauge{
			gauge("owners", "Owners in the shard's due index: every owner holding members, plus stale entries.",
				func(s expset.ShardStats) float64 { return float64(s.Owners) }),
			gauge("owners_due", "Owners with a member past its deadline: the ones the next sweep visits.",
				func(s expset.ShardStats) float64 { return float64(s.OwnersDue) }),
			gauge("members_due", "Expired members no sweeper has removed yet (counted over the first 1000 due owners).",
				func(s expset.ShardStats) float64 { return float64(s.MembersDue) }),
			gauge("members_due_partial", "1 when more owners are due than members_due was counted over, else 0.",
				func(s expset.ShardStats) float64 { return bit(s.Partial) }),
			gauge("lag_seconds", "How long ago the oldest unswept deadline passed: how far behind the sweeper is (0 when nothing is due).",
				func(s expset.ShardStats) float64 {
					if s.OldestDue.IsZero() {
						return 0
					}
					return max(s.Now.Sub(s.OldestDue).Seconds(), 0)
				}),
			gauge("events", "Expiry events in the shard's stream: waiting for a consumer, or delivered and not yet acknowledged.",
				func(s expset.ShardStats) float64 { return float64(s.Events) }),
			gauge("pending", "Expiry events delivered to a consumer and not yet acknowledged.",
				func(s expset.ShardStats) float64 { return float64(s.Pending) }),
			gauge("retries_scheduled", "Expiry events whose handler call failed, waiting for their retry delay (part of pending).",
				func(s expset.ShardStats) float64 { return float64(s.Retrying) }),
			gauge("dead_letters", "Expiry events that failed every attempt and wait in the dead-letter stream.",
				func(s expset.ShardStats) float64 { return float64(s.Dead) }),
			gauge("events_trimmed", "Expiry events the stream retention removed before every consumer group had them, since the shard began.",
				func(s expset.ShardStats) float64 { return float64(s.Trimmed) }),
			gauge("lease_held", "1 when a sweeper holds the shard's lease, else 0.",
				func(s expset.ShardStats) float64 { return bit(s.Leased) }),
			gauge("server_evicted_keys", "Keys the maxmemory-policy of the server holding the shard evicted since it started, any set's (INFO evicted_keys): above 0, members may be lost.",
				func(s expset.ShardStats) float64 { return float64(s.EvictedKeys) }),
		},
	}
}

// Describe implements prometheus.Collector.
func (c *StatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range c.gauges {
		ch <- g.desc
	}
}

// Collect implements prometheus.Collector: it reads the set's Stats, bounded
// by the collector's timeout, and sends one sample per shard and gauge, or an
// invalid metric carrying the error when the read fails.
func (c *StatsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.set.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.failed, err)
		return
	}
	for _, g := range c.gauges {
		for _, s := range st {
			ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(s), strconv.Itoa(s.Shard))
		}
	}
}

// bit is 1 for true and 0 for false.
func bit(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
