package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/expsetprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

// statsOwnerScan is how many due owners of a shard Set.Stats reads to count
// the members due (past it, ShardStats.Partial is set).
const statsOwnerScan = 1000

// scrapeLog prints the errors of failed scrapes, timestamped, to w.
type scrapeLog struct{ w io.Writer }

func (l scrapeLog) Println(v ...any) {
	fmt.Fprintf(l.w, "%s expset stats: scrape: %s", time.Now().UTC().Format(time.RFC3339), fmt.Sprintln(v...))
}

// statsReport is what "expset stats" prints; --json prints it as is.
type statsReport struct {
	Set    string     `json:"set"`
	Now    time.Time  `json:"now"`
	Events bool       `json:"events"`
	Shards []shardRow `json:"shards"`
	Total  totalRow   `json:"total"`
}

// statCounts are the numbers a shard and the totals share.
type statCounts struct {
	Owners     int64      `json:"owners"`
	OwnersDue  int64      `json:"owners_due"`
	MembersDue int64      `json:"members_due"`
	JobsDue    int64      `json:"jobs_due"`                      // jobs (Set.Put) and schedule ticks due, not yet swept
	Partial    bool       `json:"members_due_partial,omitempty"` // over statsOwnerScan owners due: MembersDue counts only the first ones
	OldestDue  *time.Time `json:"oldest_due,omitempty"`
	LagMS      int64      `json:"lag_ms"` // now - OldestDue: how far behind the sweeper is; 0 when nothing is due
	Events     int64      `json:"events"`
	Pending    int64      `json:"pending"`
	Retrying   int64      `json:"retrying"` // events waiting for their retry delay: part of pending
	Dead       int64      `json:"dead"`
	Trimmed    int64      `json:"trimmed"`             // events retention removed unconsumed, ever
	Evicted    int64      `json:"server_evicted_keys"` // keys the shard's server evicted (maxmemory-policy), any set's; the total: the most of any shard
}

type shardRow struct {
	Shard int `json:"shard"`
	statCounts
	Leased  bool `json:"leased"`
	Stalled bool `json:"stalled"` // work due and no sweeper alive: nothing is delivered
}

type totalRow struct {
	statCounts
	Leased  int `json:"leased_shards"`
	Stalled int `json:"stalled_shards"`
	// StalledDue counts the members and jobs due on the stalled shards
	// (StalledPartial: some of those shards counted only their first
	// statsOwnerScan due owners); StalledLagMS is how long the oldest of
	// them has been overdue, 0 when none is.
	StalledDue     int64 `json:"stalled_due"`
	StalledPartial bool  `json:"stalled_due_partial,omitempty"`
	StalledLagMS   int64 `json:"stalled_lag_ms"`
}

// watchFlag is --watch: a flag that needs no value (every 5s) and takes an
// interval as --watch=2s.
type watchFlag struct{ every time.Duration }

const defaultWatch = 5 * time.Second

func (w *watchFlag) String() string {
	if w == nil || w.every == 0 {
		return ""
	}
	return w.every.String()
}

func (w *watchFlag) Type() string { return "interval" }

func (w *watchFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d < 100*time.Millisecond {
		return fmt.Errorf("want an interval of 100ms or more, like --watch=2s (or --watch alone: every %v)", defaultWatch)
	}
	w.every = d
	return nil
}

func (a *app) statsCmd() *cobra.Command {
	var asJSON bool
	var watch watchFlag
	var serve string
	cmd := &cobra.Command{
		Use:   "stats [--redis URL] [--json] [--watch[=5s]] [--serve ADDR] NAME",
		Short: "per shard: owners, due members, sweeper lag, events waiting, pending, dead; --watch, --serve /metrics",
		Example: "expset stats --redis redis://localhost:6380 unpaid-orders\n" +
			"expset stats --watch=2s unpaid-orders            # a timestamped block every 2s until Ctrl-C\n" +
			"expset stats --serve :9090 unpaid-orders         # Prometheus gauges on http://host:9090/metrics",
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if serve != "" && (watch.every > 0 || asJSON) {
				return fmt.Errorf("%w: --serve goes without --watch and --json", errUsage)
			}
			return a.stats(cmd.Context(), args[0], asJSON, watch.every, serve)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of aligned text (with --watch: one object a line)")
	cmd.Flags().Var(&watch, "watch", "print the stats again every 5s, or every interval given as --watch=2s, until interrupted")
	cmd.Flags().Lookup("watch").NoOptDefVal = defaultWatch.String()
	cmd.Flags().StringVar(&serve, "serve", "", "serve the numbers, and each consumer group's, as Prometheus gauges on http://ADDR/metrics (e.g. :9090) until interrupted")
	return cmd
}

func (a *app) stats(ctx context.Context, name string, asJSON bool, every time.Duration, serve string) error {
	stdout, stderr := a.stdout, a.stderr
	c, set, err := a.openSet(ctx, name)
	if err != nil {
		return err
	}
	defer c.close()
	cfg, err := expset.ReadConfiguration(ctx, c.rdb, set.Name())
	if err != nil {
		return noSet(err, name, c)
	}
	if serve != "" {
		return serveMetrics(ctx, set, serve, stdout, stderr)
	}
	print := func() error {
		st, err := set.Stats(ctx)
		if err != nil {
			return err
		}
		rep := newStatsReport(set.Name(), cfg.Events, st)
		if asJSON {
			enc := json.NewEncoder(stdout)
			if every == 0 {
				enc.SetIndent("", "  ")
			}
			return enc.Encode(rep)
		}
		return printStats(stdout, rep)
	}
	if every == 0 {
		return print()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for first := true; ; first = false {
		if !first && !asJSON {
			fmt.Fprintln(stdout)
		}
		if err := print(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A blip must not end a watch: say so and try again.
			fmt.Fprintf(stderr, "%s expset stats: %v\n", time.Now().UTC().Format(time.RFC3339), hint(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func newStatsReport(name string, events bool, st []expset.ShardStats) statsReport {
	rep := statsReport{Set: name, Events: events, Shards: make([]shardRow, 0, len(st))}
	for _, s := range st {
		rep.Now = s.Now.UTC()
		row := shardRow{Shard: s.Shard, Leased: s.Leased, Stalled: s.Stalled, statCounts: statCounts{
			Owners: s.Owners, OwnersDue: s.OwnersDue, MembersDue: s.MembersDue, JobsDue: s.JobsDue, Partial: s.Partial,
			Events: s.Events, Pending: s.Pending, Retrying: s.Retrying, Dead: s.Dead, Trimmed: s.Trimmed, Evicted: s.EvictedKeys,
		}}
		if !s.OldestDue.IsZero() {
			d := s.OldestDue.UTC()
			row.OldestDue = &d
			row.LagMS = max(s.Now.Sub(d).Milliseconds(), 0)
		}
		rep.Shards = append(rep.Shards, row)
		t := &rep.Total
		t.Owners += row.Owners
		t.OwnersDue += row.OwnersDue
		t.MembersDue += row.MembersDue
		t.JobsDue += row.JobsDue
		t.Partial = t.Partial || row.Partial
		t.Events += row.Events
		t.Pending += row.Pending
		t.Retrying += row.Retrying
		t.Dead += row.Dead
		t.Trimmed += row.Trimmed
		t.Evicted = max(t.Evicted, row.Evicted) // shards share servers: a sum would count one twice
		if row.Leased {
			t.Leased++
		}
		if row.Stalled {
			t.Stalled++
			t.StalledDue += row.MembersDue + row.JobsDue
			t.StalledPartial = t.StalledPartial || row.Partial
			t.StalledLagMS = max(t.StalledLagMS, row.LagMS)
		}
		if row.OldestDue != nil && (t.OldestDue == nil || row.OldestDue.Before(*t.OldestDue)) {
			t.OldestDue, t.LagMS = row.OldestDue, row.LagMS
		}
	}
	return rep
}

func printStats(w io.Writer, rep statsReport) error {
	events := "off"
	if rep.Events {
		events = "on"
	}
	fmt.Fprintf(w, "set %s at %s: %d shards, expiry events %s\n\n", rep.Set, rep.Now.Format("2006-01-02T15:04:05.000Z"), len(rep.Shards), events)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tOWNERS\tOWNERS DUE\tMEMBERS DUE\tJOBS DUE\tLAG\tEVENTS\tPENDING\tRETRYING\tDEAD\tLEASE")
	row := func(label string, c statCounts, lease string) {
		due, jobs := strconv.FormatInt(c.MembersDue, 10), strconv.FormatInt(c.JobsDue, 10)
		if c.Partial {
			due += "+"
			jobs += "+"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", label, c.Owners, c.OwnersDue, due, jobs,
			lag(c.LagMS, c.OldestDue != nil), c.Events, c.Pending, c.Retrying, c.Dead, lease)
	}
	for _, s := range rep.Shards {
		lease := "-"
		switch {
		case s.Leased:
			lease = "held"
		case s.Stalled:
			lease = "none!"
		}
		row(strconv.Itoa(s.Shard), s.statCounts, lease)
	}
	row("total", rep.Total.statCounts, fmt.Sprintf("%d/%d", rep.Total.Leased, len(rep.Shards)))
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.Total.Partial {
		fmt.Fprintf(w, "\n+ counted over the first %d due owners of the shard only: more are due\n", statsOwnerScan)
	}
	if rep.Total.Stalled > 0 {
		fmt.Fprintf(w, "\n! %s\n", stalledWarning(rep.Total, len(rep.Shards)))
	}
	if rep.Total.Evicted > 0 {
		fmt.Fprintf(w, "\n! the server of a shard evicted %d keys (maxmemory-policy): members may be lost; set maxmemory-policy noeviction\n", rep.Total.Evicted)
	}
	return nil
}

// lag formats a sweeper lag: "-" when nothing is due.
func lag(ms int64, due bool) string {
	if !due {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// serveMetrics serves set's Stats and Groups on http://addr/metrics
// through the Prometheus client, read afresh for every scrape by
// expsetprom's StatsCollector, until ctx ends. A failed read answers 500 and is logged.
func serveMetrics(ctx context.Context, set *expset.Set, addr string, stdout, stderr io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--serve %s: %w", addr, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(expsetprom.NewStatsCollector(set))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      scrapeLog{stderr},
		ErrorHandling: promhttp.HTTPErrorOnError,
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "expset stats of set %q: see /metrics\n", set.Name())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "expset stats: serving set %q on http://%s/metrics until interrupted\n", set.Name(), ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("--serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("--serve %s: shut down: %w", addr, err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("--serve %s: %w", addr, err)
	}
	return nil
}
