package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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
	// The group paused (Set.Pause), and how many owners are paused in it:
	// their events are held back.
	Paused       bool  `json:"paused"`
	PausedOwners int64 `json:"paused_owners"`
}

// pauseJSON is what "expset groups pause|resume --json" prints: the state
// asked for, and whether it changed anything.
type pauseJSON struct {
	Group       string `json:"group"`
	Owner       string `json:"owner,omitempty"` // "": the whole group
	OwnerBase64 string `json:"owner_base64,omitempty"`
	Paused      bool   `json:"paused"`
	Changed     bool   `json:"changed"` // false: paused already, or not paused
	Shards      int    `json:"shards"`  // shards written: every one for a group, the owner's for an owner
}

// pausedJSON is what "expset groups paused --json" prints: the owners
// paused in a group, sorted.
type pausedJSON struct {
	Group  string           `json:"group"`
	Owners []pausedOwnerRow `json:"owners"`
}

// pausedOwnerRow is one owner paused in a group.
type pausedOwnerRow struct {
	Owner       string `json:"owner"`
	OwnerBase64 string `json:"owner_base64,omitempty"`
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
		Short: "list a set's consumer groups with their lag, pending events, dead letters, calls running, events held back and pauses; pause, resume or remove one",
		Example: "expset groups unpaid-orders\n" +
			"expset groups running unpaid-orders email\n" +
			"expset groups pause unpaid-orders email\n" +
			"expset groups paused unpaid-orders email\n" +
			"expset groups resume unpaid-orders email user-42\n" +
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
			return a.onGroup(cmd.Context(), args, func(set *expset.Set, group string) error {
				g, err := set.RemoveGroup(cmd.Context(), group)
				if err != nil {
					return err
				}
				if asJSON {
					return printGroups(a.stdout, []expset.GroupInfo{g}, true)
				}
				_, err = fmt.Fprintf(a.stdout, "removed group %q from %d shards: %d pending events released, %d unread, %d dead letters deleted\n",
					g.Name, g.Shards, g.Pending, g.Lag, g.Dead)
				return err
			})
		},
	}
	remove.Flags().BoolVar(&asJSON, "json", false, "print what the group held as JSON")
	cmd.AddCommand(remove, a.groupsRunningCmd(), a.groupsPauseCmd(true), a.groupsPauseCmd(false), a.groupsPausedCmd())
	return cmd
}

// groupsPausedCmd is "expset groups paused": the owners paused in a group.
func (a *app) groupsPausedCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "paused [--json] NAME GROUP",
		Short: "list the owners paused in a consumer group (expset groups pause NAME GROUP OWNER), sorted",
		Long: "paused lists the owners paused in GROUP, one a line, sorted by their bytes, then how many. It scans\n" +
			"the attempts hash of each shard with owners paused, 1000 fields a call. Whether the whole group is\n" +
			"paused is in expset groups NAME.",
		Example: "expset groups paused unpaid-orders email",
		Args:    args("NAME GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.onGroup(cmd.Context(), args, func(set *expset.Set, group string) error {
				owners, err := set.PausedOwners(cmd.Context(), group)
				if err != nil {
					return err
				}
				return printPaused(a.stdout, group, owners, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

// printPaused prints the owners paused in group, one a line with a count
// after them, or as JSON.
func printPaused(w io.Writer, group string, owners []string, asJSON bool) error {
	if asJSON {
		out := pausedJSON{Group: group, Owners: []pausedOwnerRow{}}
		for _, o := range owners {
			out.Owners = append(out.Owners, pausedOwnerRow{Owner: o, OwnerBase64: exact(o)})
		}
		return json.NewEncoder(w).Encode(out)
	}
	for _, o := range owners {
		if _, err := fmt.Fprintln(w, printable(o)); err != nil {
			return err
		}
	}
	n := int64(len(owners))
	_, err := fmt.Fprintf(w, "%d %s paused in group %q\n", n, plural(n, "owner", "owners"), group)
	return err
}

// groupsPauseCmd is "expset groups pause" (pause true) or "expset groups
// resume".
func (a *app) groupsPauseCmd(pause bool) *cobra.Command {
	var asJSON bool
	verb, short, long, example := "pause", "pause a consumer group, or one owner in it, in every process until resumed",
		"pause stops new handler calls of GROUP (or of OWNER's events in it) in every process, until resumed:\n"+
			"calls under way finish; the events it holds back are charged nothing and counted as held back.\n"+
			"The pause is kept in Redis. GROUP need not exist yet: pausing a group ahead of its consumers is\n"+
			"allowed, and they begin nothing until it is resumed. It says what it changed (nothing, when\n"+
			"paused already).",
		"expset groups pause unpaid-orders email\nexpset groups pause unpaid-orders email user-42"
	if !pause {
		verb, short, long, example = "resume", "resume a paused consumer group, or one paused owner in it",
			"resume ends a pause of GROUP (or of OWNER in it): the events it held back are handled at once.\n"+
				"Resuming the group leaves the owners paused in it paused. It says what it changed (nothing,\n"+
				"when not paused).",
			"expset groups resume unpaid-orders email\nexpset groups resume unpaid-orders email user-42"
	}
	cmd := &cobra.Command{
		Use:     verb + " [--json] NAME GROUP [OWNER]",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    args("NAME GROUP [OWNER]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			owner := ""
			if len(args) == 3 {
				if owner = args[2]; owner == "" {
					return fmt.Errorf("%w: OWNER is empty: leave it out to %s the whole group", errUsage, verb)
				}
			}
			return a.onGroup(cmd.Context(), args, func(set *expset.Set, group string) error {
				call := set.Pause
				if !pause {
					call = set.Resume
				}
				changed, err := call(cmd.Context(), group, owner)
				if err != nil {
					return err
				}
				shards := set.Shards()
				if owner != "" {
					shards = 1
				}
				if asJSON {
					return json.NewEncoder(a.stdout).Encode(pauseJSON{Group: group, Owner: owner, OwnerBase64: exact(owner),
						Paused: pause, Changed: changed, Shards: shards})
				}
				_, err = fmt.Fprintln(a.stdout, pauseText(pause, changed, group, owner, set))
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what changed as JSON")
	return cmd
}

// pauseText says what a pause (pause true) or resume of group of set, or
// of owner in it, changed.
func pauseText(pause, changed bool, group, owner string, set *expset.Set) string {
	verb := map[bool]string{true: "paused", false: "resumed"}[pause]
	what := fmt.Sprintf("group %q", group)
	if owner != "" {
		what = fmt.Sprintf("owner %s in group %q", printable(owner), group)
	}
	switch {
	case changed && owner != "":
		return fmt.Sprintf("%s %s on shard %d", verb, what, set.ShardOf(owner))
	case changed:
		return fmt.Sprintf("%s %s on %d shards", verb, what, set.Shards())
	case pause:
		return what + " was paused already"
	}
	return what + " was not paused"
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
			return a.onGroup(cmd.Context(), args, func(set *expset.Set, group string) error {
				r, err := set.Running(cmd.Context(), group, top)
				if err != nil {
					return err
				}
				return printRunning(a.stdout, r, time.Now(), asJSON)
			})
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
	_, err := fmt.Fprintf(w, "%d of %d %s running (%d %s); %d %s held back (read, no call under way: set aside at an owner cap or by a pause, or not yet begun)\n",
		len(r.Calls), r.Running, plural(r.Running, "call", "calls"), r.Owners, plural(r.Owners, "owner", "owners"),
		r.HeldBack, plural(r.HeldBack, "event", "events"))
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

// onGroup opens the set NAME (args[0]) of an "expset groups" subcommand
// and runs fn on it and GROUP (args[1]); fn's error becomes a usage error
// or a "not found" that says where to look (groupErr).
func (a *app) onGroup(ctx context.Context, args []string, fn func(set *expset.Set, group string) error) error {
	set, done, err := a.eventsSet(ctx, args[0], false)
	if err != nil {
		return err
	}
	defer done()
	if err := fn(set, args[1]); err != nil {
		return groupErr(err, args[0], args[1])
	}
	return nil
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
				Running: g.Running, RunningOwners: g.RunningOwners, OldestRunning: timeOrNil(g.OldestRunning), HeldBack: g.HeldBack,
				Paused: g.Paused, PausedOwners: g.PausedOwners})
		}
		return json.NewEncoder(w).Encode(rows)
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "GROUP\tSHARDS\tLAG\tPENDING\tRETRYING\tDEAD\tRUNNING\tOWNERS\tHELD BACK\tPAUSED\t")
	for _, g := range gs {
		fmt.Fprintf(tw, "%q\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", g.Name, g.Shards, g.Lag, g.Pending, g.Retrying, g.Dead, g.Running, g.RunningOwners, g.HeldBack,
			pausedText(g.Paused, g.PausedOwners))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(b.String()) {
		// An empty PAUSED leaves only padding at the line's end.
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	return nil
}

// pausedText is the PAUSED column: "yes" for a paused group, "N owners"
// (or "1 owner") for owners paused in it, both, or "".
func pausedText(group bool, owners int64) string {
	var parts []string
	if group {
		parts = append(parts, "yes")
	}
	if owners > 0 {
		parts = append(parts, fmt.Sprintf("%d %s", owners, plural(owners, "owner", "owners")))
	}
	return strings.Join(parts, ", ")
}
