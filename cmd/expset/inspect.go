package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/spf13/cobra"
)

// inspectReport is what "expset inspect" prints; --json prints it as is.
type inspectReport struct {
	Set      string          `json:"set"`
	Owner    string          `json:"owner"`
	OwnerB64 string          `json:"owner_base64,omitempty"` // the exact bytes, when they are not UTF-8
	Shard    int             `json:"shard"`
	Key      string          `json:"key"`
	KeyB64   string          `json:"key_base64,omitempty"`
	Now      time.Time       `json:"now"`
	Live     int             `json:"live"`
	Expired  int             `json:"expired_unswept"`
	Members  []inspectMember `json:"members"`
}

type inspectMember struct {
	Member    string    `json:"member"`
	MemberB64 string    `json:"member_base64,omitempty"` // the exact bytes, when they are not UTF-8
	Deadline  time.Time `json:"deadline"`
	LeftMS    int64     `json:"left_ms"`
	Expired   bool      `json:"expired"`
}

func (a *app) inspectCmd() *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:     "inspect [--redis URL] [--json] [--limit N] NAME OWNER",
		Short:   "show one owner's members, deadlines and time left, expired-but-unswept marked",
		Example: "expset inspect --redis redis://localhost:6379 unpaid-orders user-42",
		Args:    args("NAME OWNER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return fmt.Errorf("%w: --limit %d: want 1 or more", errUsage, limit)
			}
			if err := checkOwner(args[1]); err != nil {
				return err
			}
			return a.inspect(cmd.Context(), args[0], args[1], limit, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of aligned text")
	cmd.Flags().IntVar(&limit, "limit", 1000, "show at most this many members, earliest deadline first")
	return cmd
}

// maxOwnerLen is the longest owner a set holds (see expset.ErrInvalidArgument).
const maxOwnerLen = 1024

// checkOwner rejects an owner no set can hold, as a usage error.
func checkOwner(owner string) error {
	if owner == "" || len(owner) > maxOwnerLen {
		return fmt.Errorf("%w: OWNER of %d bytes: want 1 to %d bytes, as the application passed it (quote it: expset inspect NAME 'user 42')",
			errUsage, len(owner), maxOwnerLen)
	}
	return nil
}

func (a *app) inspect(ctx context.Context, name, owner string, limit int, asJSON bool) error {
	stdout := a.stdout
	c, set, err := a.openSet(ctx, name)
	if err != nil {
		return err
	}
	defer c.close()
	key := set.OwnerKey(owner)
	st := store.New(c.rdb, name, store.Options{Shards: set.Shards()})
	now, err := st.ServerTime(ctx)
	if err != nil {
		return fmt.Errorf("read the server's TIME: %w", err)
	}
	es, err := st.OwnerEntries(ctx, owner, 0, limit)
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	rep := inspectReport{Set: name, Owner: owner, OwnerB64: exact(owner), Shard: set.ShardOf(owner), Key: key, KeyB64: exact(key),
		Now: now.UTC().Truncate(time.Millisecond), Members: []inspectMember{}}
	for _, e := range es {
		d := e.Deadline.UTC()
		m := inspectMember{Member: e.ID, MemberB64: exact(e.ID), Deadline: d, LeftMS: d.Sub(rep.Now).Milliseconds(), Expired: !d.After(rep.Now)}
		if m.Expired {
			rep.Expired++
		} else {
			rep.Live++
		}
		rep.Members = append(rep.Members, m)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "set %s, owner %q: shard %d, key %s\n", name, owner, rep.Shard, printable(key))
	fmt.Fprintf(stdout, "server time %s\n\n", rep.Now.Format(time.RFC3339Nano))
	if len(rep.Members) == 0 {
		fmt.Fprintln(stdout, "no members")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tDEADLINE\tLEFT\tSTATE")
	for _, m := range rep.Members {
		state := "live"
		if m.Expired {
			state = "expired, not yet swept"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", printable(m.Member), m.Deadline.Format("2006-01-02T15:04:05.000Z"), time.Duration(m.LeftMS)*time.Millisecond, state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	more := ""
	if len(es) == limit {
		more = fmt.Sprintf(" (showing the first %d; --limit to see more)", limit)
	}
	fmt.Fprintf(stdout, "\n%d live, %d expired awaiting the sweeper%s\n", rep.Live, rep.Expired, more)
	return nil
}
