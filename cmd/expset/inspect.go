package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/expset/expset"
)

// inspectReport is what "expset inspect" prints; --json prints it as is.
type inspectReport struct {
	Set     string          `json:"set"`
	Owner   string          `json:"owner"`
	Shard   int             `json:"shard"`
	Key     string          `json:"key"`
	Now     time.Time       `json:"now"`
	Live    int             `json:"live"`
	Expired int             `json:"expired_unswept"`
	Members []inspectMember `json:"members"`
}

type inspectMember struct {
	ID       string    `json:"id"`
	Deadline time.Time `json:"deadline"`
	LeftMS   int64     `json:"left_ms"`
	Expired  bool      `json:"expired"`
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", "inspect [--redis URL] [--json] [--limit N] NAME OWNER",
		"expset inspect --redis redis://localhost:6379 unpaid-orders user-42", stderr)
	url := fs.String("redis", "", redisFlagHelp)
	asJSON := fs.Bool("json", false, "print JSON instead of aligned text")
	limit := fs.Int("limit", 1000, "show at most this many members, earliest deadline first")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("%w: want NAME OWNER, got %d arguments", errUsage, fs.NArg())
	}
	if *limit < 1 {
		return fmt.Errorf("%w: --limit %d: want 1 or more", errUsage, *limit)
	}
	name, owner := fs.Arg(0), fs.Arg(1)
	c, err := connect(ctx, *url, false)
	if err != nil {
		return err
	}
	defer c.close()
	set, err := expset.Open(ctx, c.rdb, name, expset.WithRecordedConfiguration())
	if err != nil {
		return err
	}
	key := set.OwnerKey(owner)
	now, err := c.rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("read the server's TIME: %w", err)
	}
	zs, err := c.rdb.ZRangeWithScores(ctx, key, 0, int64(*limit-1)).Result()
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	rep := inspectReport{Set: name, Owner: owner, Shard: set.ShardOf(owner), Key: key, Now: now.UTC().Truncate(time.Millisecond), Members: []inspectMember{}}
	for _, z := range zs {
		id, _ := z.Member.(string)
		d := time.UnixMilli(int64(z.Score)).UTC()
		m := inspectMember{ID: id, Deadline: d, LeftMS: d.Sub(rep.Now).Milliseconds(), Expired: !d.After(rep.Now)}
		if m.Expired {
			rep.Expired++
		} else {
			rep.Live++
		}
		rep.Members = append(rep.Members, m)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "set %s, owner %q: shard %d, key %s\n", name, owner, rep.Shard, key)
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
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", printable(m.ID), m.Deadline.Format("2006-01-02T15:04:05.000Z"), time.Duration(m.LeftMS)*time.Millisecond, state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	more := ""
	if len(zs) == *limit {
		more = fmt.Sprintf(" (showing the first %d; --limit to see more)", *limit)
	}
	fmt.Fprintf(stdout, "\n%d live, %d expired awaiting the sweeper%s\n", rep.Live, rep.Expired, more)
	return nil
}

// printable quotes a member that holds spaces or control characters, so a
// column stays one column.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '"' }) >= 0 {
		return fmt.Sprintf("%q", s)
	}
	return s
}
