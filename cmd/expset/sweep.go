package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/expset/expset"
	"github.com/spf13/cobra"
)

// sweepSummary is what "expset sweep" prints at the end; --json prints it as
// is.
type sweepSummary struct {
	Set         string  `json:"set"`
	Once        bool    `json:"once"`
	Seconds     float64 `json:"seconds"`
	Expired     int     `json:"expired"` // members removed (with expiry events: events written)
	Owners      int     `json:"owners"`
	Batches     int     `json:"batches"`
	Shards      int     `json:"shards"`  // --once: shards swept; else: shard sweeps that removed or corrected something
	Skipped     int     `json:"skipped"` // shards another sweeper held (--once)
	Stale       int     `json:"stale"`
	MaxLateMS   int64   `json:"max_lateness_ms"`
	MeanLateMS  int64   `json:"mean_lateness_ms"`
	Interrupted bool    `json:"interrupted,omitempty"`
}

// summarize fills s from the total stats of the sweep.
func (s *sweepSummary) summarize(st expset.SweepStats) {
	s.Expired, s.Owners, s.Batches, s.Shards, s.Skipped, s.Stale = st.Expired, st.Owners, st.Batches, st.Shards, st.Skipped, st.Stale
	s.MaxLateMS, s.MeanLateMS = st.MaxLateness.Milliseconds(), st.MeanLateness.Milliseconds()
}

// sweepProgress counts sweep batches as Hooks.OnSweep reports them, for the
// progress line: it sees each batch as it is swept, also inside SweepOnce
// and inside one shard's long sweep.
type sweepProgress struct {
	mu      sync.Mutex
	expired int
	owners  int
	lastLag time.Duration     // the lateness of the latest batch that removed something
	total   expset.SweepStats // what Run swept, batch by batch (MeanLateness not kept)
}

func (p *sweepProgress) onSweep(_ context.Context, _ expset.CallInfo, si expset.SweepStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expired += si.Expired
	p.owners += si.Owners
	p.total.Expired += si.Expired
	p.total.Owners += si.Owners
	p.total.Trimmed += si.Trimmed
	p.total.MaxLateness = max(p.total.MaxLateness, si.MaxLateness)
	p.total.Batches += si.Batches
	if si.Expired > 0 {
		p.lastLag = si.MaxLateness
	}
}

// report prints a progress line every interval in which something was swept,
// until the returned stop is called.
func (p *sweepProgress) report(w io.Writer, every time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		printed, at := 0, time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				p.mu.Lock()
				expired, owners, lag := p.expired, p.owners, p.lastLag
				p.mu.Unlock()
				if expired == printed {
					continue
				}
				rate := float64(expired-printed) / now.Sub(at).Seconds()
				fmt.Fprintf(w, "%s swept %d members of %d owners so far, %.0f/s, lag %v\n",
					now.UTC().Format("15:04:05"), expired, owners, rate, lag)
				printed, at = expired, now
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (a *app) sweepCmd() *cobra.Command {
	var o sweepOpts
	cmd := &cobra.Command{
		Use:   "sweep [--redis URL] [--json] [--once] [--progress 1s] [--lease-ttl 10s] [--poll-interval 1s] [--owners-per-batch 100] [--members-per-batch 1000] [--retain-age 168h] [--retain-len 100000] [--retain-bytes 67108864] NAME",
		Short: "run a sweeper in the foreground (until SIGINT, or --once), with progress and a summary",
		Example: "expset sweep --redis redis://localhost:6380 --once unpaid-orders   # drain what is due now, then exit\n" +
			"expset sweep unpaid-orders                                         # keep sweeping until Ctrl-C",
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.every < 10*time.Millisecond {
				return fmt.Errorf("%w: --progress %v: want 10ms or more", errUsage, o.every)
			}
			return a.sweep(cmd.Context(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.asJSON, "json", false, "print the summary as JSON (progress lines then go to stderr)")
	f.BoolVar(&o.once, "once", false, "sweep every shard whose lease is free once (SweepOnce), then exit")
	f.DurationVar(&o.every, "progress", time.Second, "print a progress line this often while members are swept")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "how long a shard's lease lasts without a refresh (WithLeaseTTL)")
	f.DurationVar(&o.poll, "poll-interval", time.Second, "the longest the sweeper waits before looking at its shards again (WithPollInterval)")
	f.IntVar(&o.owners, "owners-per-batch", 100, "due owners one sweep script takes (WithOwnersPerBatch)")
	f.IntVar(&o.members, "members-per-batch", 1000, "expired members one sweep script removes at most (WithMembersPerBatch)")
	f.DurationVar(&o.retainAge, "retain-age", 7*24*time.Hour, "with expiry events: events older than this are trimmed (give what the service gives WithEventRetention)")
	f.IntVar(&o.retainLen, "retain-len", 100000, "with expiry events: events a shard's stream keeps at most")
	f.Int64Var(&o.retainBytes, "retain-bytes", 64<<20, "with expiry events: bytes of memory a shard's stream takes at most")
	return cmd
}

// sweepOpts are the flags of "expset sweep".
type sweepOpts struct {
	asJSON, once    bool
	every           time.Duration
	leaseTTL, poll  time.Duration
	owners, members int
	retainAge       time.Duration
	retainLen       int
	retainBytes     int64
}

func (a *app) sweep(ctx context.Context, name string, o sweepOpts) error {
	stdout, stderr := a.stdout, a.stderr
	progressOut := stdout
	if o.asJSON {
		progressOut = stderr
	}
	c, err := a.connect(ctx, false)
	if err != nil {
		return err
	}
	defer c.close()
	var prog sweepProgress
	cfg, err := expset.ReadConfiguration(ctx, c.rdb, name)
	if err != nil {
		return noSet(err, name, c)
	}
	set, err := openExisting(ctx, c, name, expset.WithHooks(expset.Hooks{OnSweep: prog.onSweep, OnError: func(_ context.Context, ei expset.CallInfo, _ time.Duration) {
		fmt.Fprintf(stderr, "%s expset sweep: %v\n", time.Now().UTC().Format("15:04:05"), ei.Err)
	}}))
	if errors.Is(err, expset.ErrInvalidArgument) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return err
	}

	var total expset.SweepStats
	opts := []expset.SweeperOption{
		expset.WithLeaseTTL(o.leaseTTL), expset.WithPollInterval(o.poll),
		expset.WithOwnersPerBatch(o.owners), expset.WithMembersPerBatch(o.members),
	}
	if cfg.Events {
		opts = append(opts, expset.WithEventRetention(o.retainAge, o.retainLen, o.retainBytes))
	}
	w, err := expset.NewSweeper(set, opts...)
	if errors.Is(err, expset.ErrInvalidArgument) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return err
	}
	if !o.once {
		fmt.Fprintf(progressOut, "sweeping set %q (%d shards) until interrupted\n", set.Name(), set.Shards())
	}
	start := time.Now()
	stop := prog.report(progressOut, o.every)
	if o.once {
		total, err = w.SweepOnce(ctx)
	} else {
		err = w.Run(ctx)
		prog.mu.Lock()
		total = prog.total
		prog.mu.Unlock()
	}
	stop()
	if errors.Is(err, expset.ErrInvalidArgument) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	sum := sweepSummary{Set: set.Name(), Once: o.once}
	sum.summarize(total)
	sum.Seconds = time.Since(start).Round(time.Millisecond).Seconds()
	sum.Interrupted = o.once && err != nil && ctx.Err() != nil
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(sum); jerr != nil {
			return jerr
		}
	} else {
		printSweep(stdout, sum)
	}
	if sum.Interrupted {
		return errors.New("interrupted before every shard was swept")
	}
	return err
}

func printSweep(w io.Writer, s sweepSummary) {
	how := "swept until interrupted"
	if s.Once {
		how = "swept once"
	}
	if s.Interrupted {
		how = "interrupted"
	}
	fmt.Fprintf(w, "set %s %s in %v\n", s.Set, how, time.Duration(s.Seconds*float64(time.Second)))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  members removed\t%d (with expiry events: one event each)\n", s.Expired)
	fmt.Fprintf(tw, "  owners visited\t%d\n", s.Owners)
	fmt.Fprintf(tw, "  batches\t%d (sweep scripts run)\n", s.Batches)
	if s.Once {
		fmt.Fprintf(tw, "  shards swept\t%d\n", s.Shards)
		fmt.Fprintf(tw, "  shards skipped\t%d (another sweeper holds the lease)\n", s.Skipped)
	} else {
		fmt.Fprintf(tw, "  shard sweeps\t%d (that removed or corrected something)\n", s.Shards)
	}
	fmt.Fprintf(tw, "  stale entries\t%d (due-index entries corrected without removing anything)\n", s.Stale)
	fmt.Fprintf(tw, "  lateness\tmax %v, mean %v (deadline to removal)\n",
		time.Duration(s.MaxLateMS)*time.Millisecond, time.Duration(s.MeanLateMS)*time.Millisecond)
	tw.Flush()
}
