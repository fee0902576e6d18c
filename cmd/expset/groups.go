package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/expset/expset"
	"github.com/spf13/cobra"
)

// groupRowJSON is one consumer group as "expset groups --json" prints it.
type groupRowJSON struct {
	Group   string `json:"group"`
	Shards  int    `json:"shards"`
	Lag     int64  `json:"lag"`
	Pending int64  `json:"pending"`
	Dead    int64  `json:"dead"`
	Retry   int64  `json:"retrying"` // events waiting for their retry delay: part of pending
	// Handler calls under way, their owners, when the oldest began, and
	// the pending events no call has (GroupInfo).
	Running       int64      `json:"running"`
	RunningOwners int64      `json:"running_owners"`
	OldestRunning *time.Time `json:"oldest_running,omitempty"`
	HeldBack      int64      `json:"held_back"`
}

// runningJSON is what "expset groups running --json" prints.
type runningJSON struct {
	Running  int64         `json:"running"`
	Owners   int64         `json:"owners"`
	HeldBack int64         `json:"held_back"`
	Calls    []callRowJSON `json:"calls"`
}

// callRowJSON is one handler call under way (expset.RunningCall): owner
// "" for a job, whose ID is member, or a schedule's tick.
type callRowJSON struct {
	Owner        string     `json:"owner"`
	OwnerBase64  string     `json:"owner_base64,omitempty"`
	Member       string     `json:"member"`
	MemberBase64 string     `json:"member_base64,omitempty"`
	Tick         bool       `json:"tick,omitempty"`
	Attempt      int        `json:"attempt"`
	Consumer     string     `json:"consumer"`
	Started      *time.Time `json:"started,omitempty"`
	AgeSeconds   float64    `json:"age_seconds"`
	LeaseEnd     *time.Time `json:"lease_end,omitempty"`
	Shard        int        `json:"shard"`
	ID           string     `json:"id"`
}

func (a *app) groupsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "groups [--json] NAME",
		Short: "list a set's consumer groups with their lag, pending events, dead letters, calls running and events held back; remove one",
		Example: "expset groups unpaid-orders\n" +
			"expset groups running unpaid-orders email\n" +
			"expset groups remove unpaid-orders emial",
		Args: args("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, done, err := a.eventsSet(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer done()
			gs, err := set.Groups(cmd.Context())
			if err != nil {
				return err
			}
			return printGroups(a.stdout, gs, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of aligned text")
	remove := &cobra.Command{
		Use:     "remove [--json] NAME GROUP",
		Short:   "remove a consumer group from every shard, with its pending events and dead letters (stop its consumers first)",
		Example: "expset groups remove unpaid-orders emial",
		Args:    args("NAME GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, done, err := a.eventsSet(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer done()
			g, err := set.RemoveGroup(cmd.Context(), args[1])
			if err != nil {
				return groupErr(err, args[0], args[1])
			}
			if asJSON {
				return printGroups(a.stdout, []expset.GroupInfo{g}, true)
			}
			_, err = fmt.Fprintf(a.stdout, "removed group %q from %d shards: %d pending events released, %d unread, %d dead letters deleted\n",
				g.Name, g.Shards, g.Pending, g.Lag, g.Dead)
			return err
		},
	}
	remove.Flags().BoolVar(&asJSON, "json", false, "print what the group held as JSON")
	cmd.AddCommand(remove, a.groupsRunningCmd())
	return cmd
}

func (a *app) groupsRunningCmd() *cobra.Command {
	var (
		asJSON bool
		top    int
	)
	cmd := &cobra.Command{
		Use:     "running [--json] [--top N] NAME GROUP",
		Short:   "list the handler calls running in a group, the oldest first, and count the events held back",
		Example: "expset groups running unpaid-orders email --top 5",
		Args:    args("NAME GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if top < 1 || top > maxRunningCalls {
				return fmt.Errorf("%w: --top %d: want 1 to %d", errUsage, top, maxRunningCalls)
			}
			set, done, err := a.eventsSet(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer done()
			r, err := set.Running(cmd.Context(), args[1], top)
			if err != nil {
				return groupErr(err, args[0], args[1])
			}
			return printRunning(a.stdout, r, time.Now(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of aligned text")
	cmd.Flags().IntVar(&top, "top", 20, "list at most this many calls, the oldest (1 to 10000)")
	return cmd
}

// maxRunningCalls is the most calls Set.Running lists.
const maxRunningCalls = 10_000

// printRunning prints r's calls, read at now, as aligned text with a line
// of totals, or as JSON.
func printRunning(w io.Writer, r expset.RunningCalls, now time.Time, asJSON bool) error {
	if asJSON {
		out := runningJSON{Running: r.Running, Owners: r.Owners, HeldBack: r.HeldBack, Calls: []callRowJSON{}}
		for _, c := range r.Calls {
			row := callRowJSON{Owner: c.Owner, OwnerBase64: exact(c.Owner), Member: c.Member, MemberBase64: exact(c.Member), Tick: c.Tick,
				Attempt: c.Attempt, Consumer: c.Consumer, Started: timeOrNil(c.Started), LeaseEnd: timeOrNil(c.LeaseEnd), Shard: c.Shard, ID: c.ID}
			if !c.Started.IsZero() {
				row.AgeSeconds = max(now.Sub(c.Started), 0).Seconds()
			}
			out.Calls = append(out.Calls, row)
		}
		return json.NewEncoder(w).Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OWNER\tMEMBER\tATTEMPT\tCONSUMER\tAGE\tLEASE LEFT")
	for _, c := range r.Calls {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", ownerText(expset.Expiry{Owner: c.Owner, Tick: c.Tick}), printable(c.Member), c.Attempt,
			printable(c.Consumer), callAge(c, now), leaseLeft(c, now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d calls running (%d owners); %d events held back (read, no call under way: set aside at an owner cap, or not yet begun)\n",
		len(r.Calls), r.Running, r.Owners, r.HeldBack)
	return err
}

// callAge is how long c has run at now, "?" when its start is unknown.
func callAge(c expset.RunningCall, now time.Time) string {
	if c.Started.IsZero() {
		return "?"
	}
	return max(now.Sub(c.Started), 0).Round(100 * time.Millisecond).String()
}

// leaseLeft is how long c's lease runs on at now, "lapsed" once it ended
// (the consumer died or stalled), "?" when unknown.
func leaseLeft(c expset.RunningCall, now time.Time) string {
	switch {
	case c.LeaseEnd.IsZero():
		return "?"
	case !c.LeaseEnd.After(now):
		return "lapsed"
	}
	return c.LeaseEnd.Sub(now).Round(100 * time.Millisecond).String()
}

// timeOrNil is &t, or nil for the zero time (left out of JSON).
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// groupErr makes err, from a call on consumer group group of set name, a
// usage error or a "not found" that says where to look.
func groupErr(err error, name, group string) error {
	switch {
	case errors.Is(err, expset.ErrInvalidArgument):
		return fmt.Errorf("%w: %v", errUsage, err)
	case errors.Is(err, expset.ErrNotFound):
		return fmt.Errorf("%w: set %q has no consumer group %q: see expset groups %s", errNotFound, name, group, name)
	}
	return err
}

// printGroups prints gs as aligned text or as a JSON array.
func printGroups(w io.Writer, gs []expset.GroupInfo, asJSON bool) error {
	if asJSON {
		rows := make([]groupRowJSON, 0, len(gs))
		for _, g := range gs {
			rows = append(rows, groupRowJSON{Group: g.Name, Shards: g.Shards, Lag: g.Lag, Pending: g.Pending, Dead: g.Dead, Retry: g.Retrying,
				Running: g.Running, RunningOwners: g.RunningOwners, OldestRunning: timeOrNil(g.OldestRunning), HeldBack: g.HeldBack})
		}
		return json.NewEncoder(w).Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "GROUP\tSHARDS\tLAG\tPENDING\tRETRYING\tDEAD\tRUNNING\tOWNERS\tHELD BACK\t")
	for _, g := range gs {
		fmt.Fprintf(tw, "%q\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", g.Name, g.Shards, g.Lag, g.Pending, g.Retrying, g.Dead, g.Running, g.RunningOwners, g.HeldBack)
	}
	return tw.Flush()
}
