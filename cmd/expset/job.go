package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// jobReport is what "expset job" prints; --json prints it as is.
type jobReport struct {
	Set     string     `json:"set"`
	ID      string     `json:"id"`
	IDB64   string     `json:"id_base64,omitempty"` // the exact bytes, when they are not UTF-8
	State   string     `json:"state"`               // waiting, running, dead, or unknown
	Due     *time.Time `json:"due,omitempty"`
	Attempt int        `json:"attempt,omitempty"`
}

func (a *app) jobCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "job [--redis URL] [--json] NAME ID",
		Short:   "show the state of one job put with Set.Put: waiting (when due), running (which attempt), dead",
		Example: "expset job --redis redis://localhost:6379 reminders rem-42",
		Args:    args("NAME ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.job(cmd.Context(), args[0], args[1], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

func (a *app) job(ctx context.Context, name, id string, asJSON bool) error {
	c, set, err := a.openSet(ctx, name)
	if err != nil {
		return err
	}
	defer c.close()
	j, err := set.Job(ctx, id)
	if err != nil {
		return err
	}
	rep := jobReport{Set: name, ID: id, IDB64: exact(id), State: j.State, Attempt: j.Attempt}
	if rep.State == "" {
		rep.State = "unknown"
	}
	if !j.Due.IsZero() {
		d := j.Due.UTC()
		rep.Due = &d
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	switch j.State {
	case "waiting":
		fmt.Fprintf(a.stdout, "job %q of %s: waiting, due %s\n", id, name, rep.Due.Format(time.RFC3339Nano))
	case "running":
		fmt.Fprintf(a.stdout, "job %q of %s: running, attempt %d (due %s)\n", id, name, j.Attempt, rep.Due.Format(time.RFC3339Nano))
	case "dead":
		fmt.Fprintf(a.stdout, "job %q of %s: dead-lettered (due %s): see expset events dead --job %s %s\n", id, name, rep.Due.Format(time.RFC3339Nano), printable(id), name)
	default:
		fmt.Fprintf(a.stdout, "job %q of %s: unknown (never put, cancelled, or done)\n", id, name)
	}
	return nil
}
