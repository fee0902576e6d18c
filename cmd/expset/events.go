package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/expset/expset"
)

// allShards asks Set.DeadLetters for the dead letters of every shard.
const allShards = -1

// eventsFlags are the flags each action of "expset events" accepts, besides
// --redis and --json.
var eventsFlags = map[string][]string{
	"tail": {"backlog"},
	"dead": {"limit", "shard"},
	"kick": {"all"},
	"drop": {"all", "yes"},
}

func runEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events", "events [--redis URL] [--json] NAME tail|dead|kick|drop [ID...] [flags]\n\n"+
		"  tail  print expiry events as sweeps write them, without consuming them, until interrupted\n"+
		"  dead  list dead letters: events that failed every attempt\n"+
		"  kick  put dead letters back on their event streams, delivered again from attempt 1\n"+
		"  drop  delete dead letters for good\n\n"+
		"An ID is a dead letter's ID as 'dead' lists it, or SHARD/ID when the same ID is in several shards.",
		"expset events --redis redis://localhost:6380 unpaid-orders tail\n"+
			"expset events unpaid-orders dead --limit 20\n"+
			"expset events unpaid-orders kick 1732245000123-0 3/1732245000123-1\n"+
			"expset events unpaid-orders kick --all\n"+
			"expset events unpaid-orders drop --all --yes", stderr)
	url := fs.String("redis", "", redisFlagHelp)
	asJSON := fs.Bool("json", false, "print JSON instead of aligned text (tail: one object a line)")
	backlog := fs.Bool("backlog", false, "tail: first print the events already waiting in the streams")
	limit := fs.Int("limit", 100, "dead: show at most this many dead letters, oldest first in shard order")
	shard := fs.Int("shard", allShards, "dead: only this shard's dead letters (-1: every shard)")
	all := fs.Bool("all", false, "kick, drop: every dead letter of the set")
	yes := fs.Bool("yes", false, "drop --all: really delete them all")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		return fmt.Errorf("%w: want NAME and an action (tail, dead, kick, drop)", errUsage)
	}
	name, action, ids := fs.Arg(0), fs.Arg(1), fs.Args()[2:]
	allowed, ok := eventsFlags[action]
	if !ok {
		return fmt.Errorf("%w: unknown action %q: want tail, dead, kick or drop", errUsage, action)
	}
	var bad []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "redis" && f.Name != "json" && !slices.Contains(allowed, f.Name) {
			bad = append(bad, "--"+f.Name)
		}
	})
	switch {
	case len(bad) > 0:
		return fmt.Errorf("%w: %s: not a flag of %s", errUsage, strings.Join(bad, ", "), action)
	case (action == "tail" || action == "dead") && len(ids) > 0:
		return fmt.Errorf("%w: %s takes no IDs, got %q", errUsage, action, ids)
	case (action == "kick" || action == "drop") && (len(ids) > 0) == *all:
		return fmt.Errorf("%w: %s wants dead-letter IDs or --all (one of the two)", errUsage, action)
	case action == "drop" && *all && !*yes:
		return fmt.Errorf("%w: drop --all deletes every dead letter of %s for good: add --yes", errUsage, name)
	case action == "dead" && *limit < 1:
		return fmt.Errorf("%w: --limit %d: want 1 or more", errUsage, *limit)
	}
	refs, err := parseRefs(ids)
	if err != nil {
		return err
	}

	cfg, c, err := connectSet(ctx, *url, name, action == "tail")
	if err != nil {
		return err
	}
	defer c.close()
	set, err := expset.Open(ctx, c.rdb, name, cfg.Options()...)
	if err != nil {
		return err
	}
	if !cfg.Events {
		return fmt.Errorf("%w: set %q was opened without WithExpiryEvents", expset.ErrNoEvents, name)
	}
	switch action {
	case "tail":
		return tailEvents(ctx, set, *backlog, *asJSON, stdout, stderr)
	case "dead":
		if *shard != allShards && (*shard < 0 || *shard >= set.Shards()) {
			return fmt.Errorf("%w: --shard %d: want 0 to %d", errUsage, *shard, set.Shards()-1)
		}
		return listDead(ctx, set, *shard, *limit, *asJSON, stdout)
	default:
		return kickOrDrop(ctx, set, action, refs, *asJSON, stdout)
	}
}

// connectSet connects and reads the set's configuration. tail gets a
// connection per shard, each blocked in a read, so it connects again with a
// pool that size once it knows the shard count.
func connectSet(ctx context.Context, url, name string, perShard bool) (expset.Configuration, *conn, error) {
	c, err := connect(ctx, url, false)
	if err != nil {
		return expset.Configuration{}, nil, err
	}
	cfg, err := expset.ReadConfiguration(ctx, c.rdb, name)
	if err == nil && !perShard {
		return cfg, c, nil
	}
	c.close()
	if err != nil {
		return cfg, nil, err
	}
	c, err = connectPool(ctx, url, false, cfg.Shards+2)
	return cfg, c, err
}

// tailLine is one event as "events tail --json" prints it.
type tailLine struct {
	Shard    int       `json:"shard"`
	ID       string    `json:"id"`
	Owner    string    `json:"owner"`
	Member   string    `json:"member"`
	Deadline time.Time `json:"deadline"`
	Swept    time.Time `json:"swept"` // when the sweeper wrote it: the time in its ID
	Payload  []byte    `json:"payload,omitempty"`
}

// tailEvents prints the set's expiry events as they are written, reading
// each shard's stream on its own connection (on a cluster the shards live on
// different nodes), blocked in XREAD outside any consumer group, until ctx
// ends.
func tailEvents(ctx context.Context, set *expset.Set, backlog, asJSON bool, stdout, stderr io.Writer) error {
	// Fix every shard's starting point before saying so: an event written
	// after the line below is printed.
	from := make([]string, set.Shards())
	for i := range from {
		from[i] = "0-0"
		if !backlog {
			_, next, err := set.ReadEvents(ctx, i, "$", 1, 0)
			if err != nil {
				return fmt.Errorf("shard %d: %w", i, err)
			}
			from[i] = next
		}
	}
	status := stdout
	if asJSON {
		status = stderr
	}
	fmt.Fprintf(status, "tailing expiry events of set %s (%d shards) without consuming them; Ctrl-C to stop\n", set.Name(), set.Shards())

	lines := make(chan expset.Expiry)
	for i := range from {
		go func() {
			after := from[i]
			for ctx.Err() == nil {
				evs, next, err := set.ReadEvents(ctx, i, after, 100, time.Second)
				after = next
				if err != nil && ctx.Err() == nil {
					fmt.Fprintf(stderr, "%s expset events tail: shard %d: %v\n", time.Now().UTC().Format("15:04:05"), i, err)
					if sleep(ctx, time.Second) != nil {
						return
					}
				}
				for _, e := range evs {
					select {
					case lines <- e:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	enc := json.NewEncoder(stdout)
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-lines:
			swept := idTime(e.ID)
			if asJSON {
				if err := enc.Encode(tailLine{Shard: e.Shard, ID: e.ID, Owner: e.Owner, Member: e.Member,
					Deadline: e.Deadline.UTC(), Swept: swept, Payload: e.Payload}); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(stdout, "%s shard=%d id=%s owner=%s member=%s deadline=%s late=%v payload=%dB\n",
				swept.Format("15:04:05.000"), e.Shard, e.ID, printable(e.Owner), printable(e.Member),
				e.Deadline.UTC().Format("2006-01-02T15:04:05.000Z"), swept.Sub(e.Deadline), len(e.Payload))
		}
	}
}

// idTime is the time in a stream entry ID (milliseconds before the dash).
func idTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n).UTC()
}

// deadLine is one dead letter as "events dead --json" prints it.
type deadLine struct {
	Shard    int       `json:"shard"`
	ID       string    `json:"id"`
	Owner    string    `json:"owner"`
	Member   string    `json:"member"`
	Deadline time.Time `json:"deadline"`
	Attempts int       `json:"attempts"`
	Error    string    `json:"error"`
	Buried   time.Time `json:"buried"`
	Group    string    `json:"group"`
	Consumer string    `json:"consumer"`
	EventID  string    `json:"event_id"` // its ID in the event stream before it was buried
}

func toDeadLines(ds []expset.DeadLetter) []deadLine {
	out := make([]deadLine, 0, len(ds))
	for _, d := range ds {
		out = append(out, deadLine{Shard: d.Shard, ID: d.ID, Owner: d.Event.Owner, Member: d.Event.Member,
			Deadline: d.Event.Deadline.UTC(), Attempts: d.Event.Attempt, Error: d.Error, Buried: d.Buried.UTC(),
			Group: d.Group, Consumer: d.Consumer, EventID: d.Event.ID})
	}
	return out
}

func listDead(ctx context.Context, set *expset.Set, shard, limit int, asJSON bool, stdout io.Writer) error {
	ds, err := set.DeadLetters(ctx, shard, limit+1)
	if err != nil {
		return err
	}
	more := len(ds) > limit
	ds = ds[:min(len(ds), limit)]
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(toDeadLines(ds))
	}
	if len(ds) == 0 {
		fmt.Fprintf(stdout, "no dead letters in set %s\n", set.Name())
		return nil
	}
	if err := printDead(stdout, ds, true); err != nil {
		return err
	}
	note := ""
	if more {
		note = fmt.Sprintf(" (the first %d; --limit to see more)", limit)
	}
	fmt.Fprintf(stdout, "\n%s%s; 'kick ID...' re-queues them, 'drop ID...' deletes them\n", deadLetters(len(ds)), note)
	return nil
}

func printDead(w io.Writer, ds []expset.DeadLetter, detail bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if detail {
		fmt.Fprintln(tw, "SHARD\tID\tOWNER\tMEMBER\tDEADLINE\tATTEMPTS\tBURIED\tLAST ERROR")
	} else {
		fmt.Fprintln(tw, "SHARD\tID\tOWNER\tMEMBER")
	}
	for _, d := range ds {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s", d.Shard, d.ID, printable(d.Event.Owner), printable(d.Event.Member))
		if detail {
			fmt.Fprintf(tw, "\t%s\t%d\t%s\t%s", d.Event.Deadline.UTC().Format("2006-01-02T15:04:05.000Z"), d.Event.Attempt,
				d.Buried.UTC().Format("2006-01-02T15:04:05.000Z"), strconv.Quote(d.Error))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// deadRef is a dead letter named on the command line: ID, or SHARD/ID.
type deadRef struct {
	shard int // allShards when not given
	id    string
}

var streamID = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

func parseRefs(args []string) ([]deadRef, error) {
	var out []deadRef
	for _, a := range args {
		r := deadRef{shard: allShards, id: a}
		if s, id, ok := strings.Cut(a, "/"); ok {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%w: %q: want ID or SHARD/ID", errUsage, a)
			}
			r = deadRef{shard: n, id: id}
		}
		if !streamID.MatchString(r.id) {
			return nil, fmt.Errorf("%w: %q is not a dead letter's ID (like 1732245000123-0)", errUsage, a)
		}
		out = append(out, r)
	}
	return out, nil
}

// resolve finds the dead letters refs name among all of set's; it changes
// nothing, and fails when any is missing (errNotFound) or ambiguous.
func resolve(set *expset.Set, all []expset.DeadLetter, refs []deadRef) ([]expset.DeadLetter, error) {
	var out []expset.DeadLetter
	var missing []string
	for _, r := range refs {
		if r.shard != allShards && r.shard >= set.Shards() {
			return nil, fmt.Errorf("%w: %d/%s: set %s has shards 0 to %d", errUsage, r.shard, r.id, set.Name(), set.Shards()-1)
		}
		var found []expset.DeadLetter
		for _, d := range all {
			if d.ID == r.id && (r.shard == allShards || r.shard == d.Shard) {
				found = append(found, d)
			}
		}
		switch {
		case len(found) == 0 && r.shard == allShards:
			missing = append(missing, fmt.Sprintf("%s (in no shard's dead-letter stream, %s to %s)", r.id, set.DeadLettersKey(0), set.DeadLettersKey(set.Shards()-1)))
		case len(found) == 0:
			missing = append(missing, fmt.Sprintf("%s in shard %d (%s)", r.id, r.shard, set.DeadLettersKey(r.shard)))
		case len(found) > 1:
			var in []string
			for _, d := range found {
				in = append(in, fmt.Sprintf("%d/%s", d.Shard, d.ID))
			}
			return nil, fmt.Errorf("%w: %s is in several shards: name one of %s", errUsage, r.id, strings.Join(in, ", "))
		}
		for _, d := range found {
			if !slices.ContainsFunc(out, func(o expset.DeadLetter) bool { return o.Shard == d.Shard && o.ID == d.ID }) {
				out = append(out, d)
			}
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: no dead letter %s; nothing changed", errNotFound, strings.Join(missing, ", no dead letter "))
	}
	return out, nil
}

// kickResult is what "events kick|drop --json" prints.
type kickResult struct {
	Action  string     `json:"action"`
	Done    int        `json:"done"` // found and kicked or deleted
	Letters []deadLine `json:"letters"`
}

func kickOrDrop(ctx context.Context, set *expset.Set, action string, refs []deadRef, asJSON bool, stdout io.Writer) error {
	all, err := set.DeadLetters(ctx, allShards, 0)
	if err != nil {
		return err
	}
	letters := all
	if len(refs) > 0 {
		if letters, err = resolve(set, all, refs); err != nil {
			return err
		}
	}
	var n int
	if len(letters) > 0 {
		if action == "kick" {
			n, err = set.Kick(ctx, letters...)
		} else {
			n, err = set.DeleteDeadLetters(ctx, letters...)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w (%d done before)", action, err, n)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(kickResult{Action: action, Done: n, Letters: toDeadLines(letters)}); err != nil {
			return err
		}
	} else {
		what := "kicked %s of set %s back onto their event streams (delivered again from attempt 1)"
		if action == "drop" {
			what = "deleted %s of set %s for good"
		}
		fmt.Fprintf(stdout, what+"\n", deadLetters(n), set.Name())
		if len(letters) > 0 {
			fmt.Fprintln(stdout)
			if err := printDead(stdout, letters, false); err != nil {
				return err
			}
		}
	}
	if n < len(letters) && len(refs) > 0 {
		// Another operator or process kicked or dropped some in between.
		return fmt.Errorf("%w: %d of the %d dead letters named were gone by the time of the %s", errNotFound, len(letters)-n, len(letters), action)
	}
	return nil
}

// deadLetters says "1 dead letter", "2 dead letters".
func deadLetters(n int) string {
	if n == 1 {
		return "1 dead letter"
	}
	return strconv.Itoa(n) + " dead letters"
}
