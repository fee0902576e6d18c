package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

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
	// Handler calls under way holding an owner slot (WithOwnerConcurrency),
	// and their owners.
	Running       int64 `json:"running"`
	RunningOwners int64 `json:"running_owners"`
}

// ownerRowJSON is one owner as "expset groups running --json" prints it.
type ownerRowJSON struct {
	Owner       string `json:"owner"`
	OwnerBase64 string `json:"owner_base64,omitempty"`
	Running     int64  `json:"running"`
}

func (a *app) groupsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "groups [--json] NAME",
		Short: "list a set's consumer groups with their lag, pending events, dead letters and calls running; remove one",
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
		Short:   "list the owners with handler calls running in a group under WithOwnerConcurrency, most first",
		Example: "expset groups running unpaid-orders email --top 5",
		Args:    args("NAME GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if top < 1 || top > maxRunningOwners {
				return fmt.Errorf("%w: --top %d: want 1 to %d", errUsage, top, maxRunningOwners)
			}
			set, done, err := a.eventsSet(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer done()
			owners, err := set.Running(cmd.Context(), args[1], maxRunningOwners)
			if err != nil {
				return groupErr(err, args[0], args[1])
			}
			return printRunning(a.stdout, owners, top, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of aligned text")
	cmd.Flags().IntVar(&top, "top", 20, "list at most this many owners (1 to 10000)")
	return cmd
}

// maxRunningOwners is the most owners Set.Running lists.
const maxRunningOwners = 10_000

// printRunning prints the first top of owners as aligned text, with a line
// of totals over all of them, or as a JSON array.
func printRunning(w io.Writer, owners []expset.OwnerCalls, top int, asJSON bool) error {
	shown := owners[:min(top, len(owners))]
	if asJSON {
		rows := make([]ownerRowJSON, 0, len(shown))
		for _, o := range shown {
			rows = append(rows, ownerRowJSON{Owner: o.Owner, OwnerBase64: exact(o.Owner), Running: o.Calls})
		}
		return json.NewEncoder(w).Encode(rows)
	}
	var calls int64
	for _, o := range owners {
		calls += o.Calls
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OWNER\tRUNNING")
	for _, o := range shown {
		fmt.Fprintf(tw, "%s\t%d\n", printable(o.Owner), o.Calls)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	more := ""
	if len(owners) == maxRunningOwners {
		more = " or more"
	}
	_, err := fmt.Fprintf(w, "%d of %d%s owners with calls running (%d calls)\n", len(shown), len(owners), more, calls)
	return err
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
				Running: g.Running, RunningOwners: g.RunningOwners})
		}
		return json.NewEncoder(w).Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "GROUP\tSHARDS\tLAG\tPENDING\tRETRYING\tDEAD\tRUNNING\tOWNERS\t")
	for _, g := range gs {
		fmt.Fprintf(tw, "%q\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", g.Name, g.Shards, g.Lag, g.Pending, g.Retrying, g.Dead, g.Running, g.RunningOwners)
	}
	return tw.Flush()
}
