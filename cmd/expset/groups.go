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
}

func (a *app) groupsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "groups [--json] NAME",
		Short: "list a set's consumer groups with their lag, pending events and dead letters; remove one",
		Example: "expset groups unpaid-orders\n" +
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
			switch {
			case errors.Is(err, expset.ErrInvalidArgument):
				return fmt.Errorf("%w: %v", errUsage, err)
			case errors.Is(err, expset.ErrNotFound):
				return fmt.Errorf("%w: set %q has no consumer group %q: see expset groups %s", errNotFound, args[0], args[1], args[0])
			case err != nil:
				return err
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
	cmd.AddCommand(remove)
	return cmd
}

// printGroups prints gs as aligned text or as a JSON array.
func printGroups(w io.Writer, gs []expset.GroupInfo, asJSON bool) error {
	if asJSON {
		rows := make([]groupRowJSON, 0, len(gs))
		for _, g := range gs {
			rows = append(rows, groupRowJSON{Group: g.Name, Shards: g.Shards, Lag: g.Lag, Pending: g.Pending, Dead: g.Dead, Retry: g.Retrying})
		}
		return json.NewEncoder(w).Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "GROUP\tSHARDS\tLAG\tPENDING\tRETRYING\tDEAD\t")
	for _, g := range gs {
		fmt.Fprintf(tw, "%q\t%d\t%d\t%d\t%d\t%d\t\n", g.Name, g.Shards, g.Lag, g.Pending, g.Retrying, g.Dead)
	}
	return tw.Flush()
}
