package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// schedulesReport is what "expset schedules" prints; --json prints it as
// is.
type schedulesReport struct {
	Set       string          `json:"set"`
	Schedules []scheduleEntry `json:"schedules"`
}

type scheduleEntry struct {
	ID      string     `json:"id"`
	IDB64   string     `json:"id_base64,omitempty"` // the exact bytes, when they are not UTF-8
	Spec    string     `json:"spec"`
	CatchUp int        `json:"catch_up"`
	Paused  bool       `json:"paused"`
	Next    *time.Time `json:"next,omitempty"` // absent when paused, or while a sweeper computes more ticks
	Last    *time.Time `json:"last,omitempty"` // absent before the first tick
}

func (a *app) schedulesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "schedules [--redis URL] [--json] NAME",
		Short:   "list the recurring schedules of a set (Set.PutSchedule): spec, next and last tick, paused",
		Example: "expset schedules --redis redis://localhost:6379 reports",
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.schedules(cmd.Context(), args[0], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

// utcPtr returns t in UTC, or nil for the zero time.
func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func (a *app) schedules(ctx context.Context, name string, asJSON bool) error {
	c, set, err := a.openSet(ctx, name)
	if err != nil {
		return err
	}
	defer c.close()
	list, err := set.Schedules(ctx)
	if err != nil {
		return err
	}
	rep := schedulesReport{Set: name, Schedules: []scheduleEntry{}}
	for _, s := range list {
		rep.Schedules = append(rep.Schedules, scheduleEntry{ID: s.ID, IDB64: exact(s.ID), Spec: s.Spec, CatchUp: s.CatchUp,
			Paused: s.Paused, Next: utcPtr(s.Next), Last: utcPtr(s.Last)})
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if len(rep.Schedules) == 0 {
		fmt.Fprintf(a.stdout, "set %s has no schedules\n", name)
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tSPEC\tNEXT TICK\tLAST TICK")
	at := func(t *time.Time, none string) string {
		if t == nil {
			return none
		}
		return t.Format("2006-01-02T15:04:05.000Z")
	}
	for _, s := range rep.Schedules {
		next := at(s.Next, "-")
		if s.Paused {
			next = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", printable(s.ID), s.Spec, next, at(s.Last, "-"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\n%d schedule(s) of set %s\n", len(rep.Schedules), name)
	return nil
}
