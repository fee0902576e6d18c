// Package expsetprom exports expset as Prometheus metrics, in two
// collectors. Collector is fed by expset.Hooks: what the processes do (script
// calls and their latency, acquire outcomes, sweeps, event handling).
// StatsCollector reads Set.Stats and Set.Groups on every scrape: what waits
// in Redis (due members, sweeper lag, events, dead letters, per shard; lag,
// retries, dead letters and calls running, per consumer group). The package
// lives in its own module so that the core library does not make its users
// depend on the Prometheus client.
//
//	c := expsetprom.NewCollector()
//	prometheus.MustRegister(c)
//	orders, err := expset.Open(context.Background(), rdb, "orders", expset.WithHooks(c.Hooks()))
//	...
//	prometheus.MustRegister(expsetprom.NewStatsCollector(orders))
//
// One Collector can serve any number of sets: every metric carries the set's
// name as the label "set".
package expsetprom

import (
	"context"

	"time"

	"github.com/expset/expset"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector fed by expset.Hooks. It is safe for
// simultaneous use by multiple goroutines. The zero value is not usable;
// create one with NewCollector.
//
// Metrics (namespace "expset" unless WithNamespace says otherwise):
//
//	expset_calls_total{set,op,result}            script round trips; result is ok or error
//	expset_call_duration_seconds{set,op}         their latency as the client saw it
//	expset_acquire_total{set,outcome}            admitted, existing (a retry) or denied
//	expset_evicted_total{set}                    members evicted by WithEvictOldest
//	expset_sweep_batches_total{set}              sweep batches run
//	expset_swept_owners_total{set}               owners visited by sweeps
//	expset_swept_members_total{set}              expired members removed by sweeps
//	expset_sweep_lateness_seconds{set}           per batch, how late its latest removal was
//	expset_event_attempts_total{set,result}      handler calls: ok, error, dead_lettered
//	expset_events_trimmed_total{set}             events retention removed unconsumed
//	expset_loop_errors_total{set,op}             errors Sweeper.Run and Consume survived
//	expset_wait_seconds{set,outcome}             AcquireWaits that waited, and how long: admitted or given_up
//
// With these hooks installed, the errors the loops survive are counted here
// instead of being logged (see expset.Hooks.OnError); to log them as well,
// wrap Hooks().OnError.
type Collector struct {
	calls    *prometheus.CounterVec
	callTime *prometheus.HistogramVec
	acquires *prometheus.CounterVec
	evicted  *prometheus.CounterVec
	batches  *prometheus.CounterVec
	owners   *prometheus.CounterVec
	swept    *prometheus.CounterVec
	lateness *prometheus.HistogramVec
	events   *prometheus.CounterVec
	trimmed  *prometheus.CounterVec
	errors   *prometheus.CounterVec
	waits    *prometheus.HistogramVec
	all      []prometheus.Collector
}

// Option configures a Collector.
type Option func(*config)

type config struct {
	namespace    string
	buckets      []float64
	statsTimeout time.Duration
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) config {
	cfg := config{namespace: "expset", buckets: prometheus.ExponentialBuckets(0.0001, 2, 15), statsTimeout: DefaultStatsTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// WithNamespace sets the metric name prefix (default "expset").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithBuckets sets the latency histogram buckets in seconds (default
// 100µs to about 1.6s, doubling). Collector only.
func WithBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// WithStatsTimeout bounds the reads of one scrape, Set.Stats and Set.Groups
// together (default DefaultStatsTimeout, 10s; zero or less keeps the
// default). StatsCollector only.
func WithStatsTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.statsTimeout = d
		}
	}
}

// NewCollector returns a collector with all its metrics at zero.
func NewCollector(opts ...Option) *Collector {
	cfg := newConfig(opts)
	ns := cfg.namespace
	c := &Collector{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "calls_total",
			Help: "Script round trips to Redis, by operation and result (ok or error)."}, []string{"set", "op", "result"}),
		callTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "call_duration_seconds",
			Help: "Latency of script round trips as the client saw it.", Buckets: cfg.buckets}, []string{"set", "op"}),
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "acquire_total",
			Help: "Quota decisions: admitted, existing (a retry of a member already held) or denied."}, []string{"set", "outcome"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "evicted_total",
			Help: "Members evicted to make room (WithEvictOldest)."}, []string{"set"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sweep_batches_total",
			Help: "Sweep batches run."}, []string{"set"}),
		owners: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "swept_owners_total",
			Help: "Owners visited by sweeps."}, []string{"set"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "swept_members_total",
			Help: "Expired members removed by sweeps."}, []string{"set"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "sweep_lateness_seconds",
			Help:    "Per sweep batch, how long after its deadline the latest-swept member was removed.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"set"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "event_attempts_total",
			Help: "Expiry events given to handlers, by result: ok, error, dead_lettered."}, []string{"set", "result"}),
		trimmed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "events_trimmed_total",
			Help: "Expiry events the stream retention removed before every consumer group had them (WithEventRetention)."}, []string{"set"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "loop_errors_total",
			Help: "Errors the background loops (Sweeper.Run, Consume) survived and retried, by operation."}, []string{"set", "op"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "wait_seconds",
			Help:    "Quota.AcquireWait calls that had to wait, by outcome (admitted or given_up), and how long they waited.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, []string{"set", "outcome"}),
	}
	c.all = []prometheus.Collector{c.calls, c.callTime, c.acquires, c.evicted, c.batches, c.owners, c.swept, c.lateness, c.events, c.trimmed, c.errors, c.waits}
	return c
}

// Hooks returns the hooks that feed the collector; pass them to expset.Open
// with expset.WithHooks.
func (c *Collector) Hooks() expset.Hooks {
	return expset.Hooks{
		OnCall: func(_ context.Context, ci expset.CallInfo) {
			result := "ok"
			if ci.Err != nil {
				result = "error"
			}
			c.calls.WithLabelValues(ci.Set, ci.Op, result).Inc()
			c.callTime.WithLabelValues(ci.Set, ci.Op).Observe(ci.Duration.Seconds())
		},
		OnAcquire: func(_ context.Context, ci expset.CallInfo, d expset.Decision) {
			outcome := "denied"
			switch {
			case d.Existing:
				outcome = "existing"
			case d.Allowed:
				outcome = "admitted"
			}
			c.acquires.WithLabelValues(ci.Set, outcome).Inc()
			if n := len(d.Evicted); n > 0 {
				c.evicted.WithLabelValues(ci.Set).Add(float64(n))
			}
		},
		OnSweep: func(_ context.Context, ci expset.CallInfo, st expset.SweepStats) {
			if st.Trimmed > 0 {
				c.trimmed.WithLabelValues(ci.Set).Add(float64(st.Trimmed))
			}
			if st.Batches == 0 {
				return
			}
			c.batches.WithLabelValues(ci.Set).Add(float64(st.Batches))
			c.owners.WithLabelValues(ci.Set).Add(float64(st.Owners))
			c.swept.WithLabelValues(ci.Set).Add(float64(st.Expired))
			if st.Expired > 0 {
				c.lateness.WithLabelValues(ci.Set).Observe(st.MaxLateness.Seconds())
			}
		},
		OnEvent: func(_ context.Context, ci expset.CallInfo, ei expset.EventInfo) {
			result := "ok"
			switch {
			case ei.DeadLettered:
				result = "dead_lettered"
			case ci.Err != nil:
				result = "error"
			}
			c.events.WithLabelValues(ci.Set, result).Inc()
		},
		OnError: func(_ context.Context, ci expset.CallInfo, _ time.Duration) {
			c.errors.WithLabelValues(ci.Set, ci.Op).Inc()
		},
		OnWait: func(_ context.Context, ci expset.CallInfo) {
			outcome := "given_up"
			if ci.Err == nil {
				outcome = "admitted"
			}
			c.waits.WithLabelValues(ci.Set, outcome).Observe(ci.Duration.Seconds())
		},
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.all {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.all {
		m.Collect(ch)
	}
}
