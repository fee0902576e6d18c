package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/expset/expset"
	"github.com/spf13/cobra"
)

// allShards asks Set.DeadLetters for the dead letters of every shard.
const allShards = -1

func (a *app) eventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events tail|dead|kick|drop NAME [ID...]",
		Short: "tail expiry events without consuming them; list, kick or drop dead letters",
		Long: "Expiry events of a set opened WithExpiryEvents. An ID is a dead letter's ID as 'dead' lists it,\n" +
			"or SHARD/ID when the same ID is in several shards.",
		Example: "expset events tail --redis redis://localhost:6380 unpaid-orders\n" +
			"expset events dead unpaid-orders --limit 20\n" +
			"expset events kick unpaid-orders 1732245000123-0 3/1732245000123-1\n" +
			"expset events kick unpaid-orders --all\n" +
			"expset events drop unpaid-orders --all --yes",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%w: want a verb: tail, dead, kick or drop, as in: expset events tail NAME", errUsage)
			}
			return fmt.Errorf("%w: unknown verb %q: want tail, dead, kick or drop, as in: expset events tail NAME", errUsage, args[0])
		},
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	var asJSON bool
	withJSON := func(c *cobra.Command, help string) *cobra.Command {
		c.Flags().BoolVar(&asJSON, "json", false, help)
		return c
	}

	var backlog bool
	tail := withJSON(&cobra.Command{
		Use:     "tail [--backlog] [--json] NAME",
		Short:   "print expiry events as sweeps write them, without consuming them, until interrupted",
		Example: "expset events tail --redis redis://localhost:6380 unpaid-orders",
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, done, err := a.eventsSet(cmd.Context(), args[0], true)
			if err != nil {
				return err
			}
			defer done()
			return tailEvents(cmd.Context(), set, backlog, asJSON, a.stdout, a.stderr)
		},
	}, "print one JSON object a line")
	tail.Flags().BoolVar(&backlog, "backlog", false, "first print the events already waiting in the streams")

	var limit, shard int
	var job string
	dead := withJSON(&cobra.Command{
		Use:     "dead [--limit 100] [--shard N | --job ID] [--json] NAME",
		Short:   "list dead letters: events that failed every attempt or were buried",
		Example: "expset events dead unpaid-orders --limit 20\nexpset events dead reminders --job rem-42",
		Args:    args("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return fmt.Errorf("%w: --limit %d: want 1 or more", errUsage, limit)
			}
			if cmd.Flags().Changed("job") && (job == "" || cmd.Flags().Changed("shard")) {
				return fmt.Errorf("%w: --job wants a job's ID, and goes without --shard (a job's ID picks its shard)", errUsage)
			}
			set, done, err := a.eventsSet(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer done()
			if shard != allShards && (shard < 0 || shard >= set.Shards()) {
				return fmt.Errorf("%w: --shard %d: want 0 to %d", errUsage, shard, set.Shards()-1)
			}
			return listDead(cmd.Context(), set, deadSel{shard: shard, job: job}, limit, asJSON, a.stdout)
		},
	}, "print JSON instead of aligned text")
	dead.Flags().IntVar(&limit, "limit", 100, "show at most this many dead letters, oldest first in shard order")
	dead.Flags().IntVar(&shard, "shard", allShards, "only this shard's dead letters (-1: every shard)")
	dead.Flags().StringVar(&job, "job", "", "only the dead letters of this job (Set.Put's ID), one per group that gave up on it")

	kickOrDropCmd := func(verb, short, example string) *cobra.Command {
		var all, yes bool
		var job string
		c := withJSON(&cobra.Command{
			Use:     verb + " [--json] NAME ID...|--all|--job ID",
			Short:   short,
			Example: example,
			Args: func(_ *cobra.Command, args []string) error {
				if len(args) == 0 {
					return fmt.Errorf("%w: want NAME, then dead-letter IDs or --all", errUsage)
				}
				return nil
			},
			RunE: func(cmd *cobra.Command, args []string) error {
				name, ids := args[0], args[1:]
				switch {
				case btoi(len(ids) > 0)+btoi(all)+btoi(cmd.Flags().Changed("job")) != 1:
					return fmt.Errorf("%w: %s wants dead-letter IDs, --all or --job ID (one of the three)", errUsage, verb)
				case cmd.Flags().Changed("job") && job == "":
					return fmt.Errorf("%w: --job wants a job's ID", errUsage)
				case verb == "drop" && all && !yes:
					return fmt.Errorf("%w: drop --all deletes every dead letter of %s for good: add --yes", errUsage, name)
				}
				refs, err := parseRefs(ids)
				if err != nil {
					return err
				}
				set, done, err := a.eventsSet(cmd.Context(), name, false)
				if err != nil {
					return err
				}
				defer done()
				return kickOrDrop(cmd.Context(), set, verb, deadPick{refs: refs, job: job}, asJSON, a.stdout)
			},
		}, "print JSON instead of aligned text")
		c.Flags().BoolVar(&all, "all", false, "every dead letter of the set")
		c.Flags().StringVar(&job, "job", "", "every dead letter of this job (Set.Put's ID)")
		if verb == "drop" {
			c.Flags().BoolVar(&yes, "yes", false, "with --all: really delete them all")
		}
		return c
	}
	cmd.AddCommand(tail, dead,
		kickOrDropCmd("kick", "put dead letters back on their event streams, delivered again from attempt 1",
			"expset events kick unpaid-orders 1732245000123-0 3/1732245000123-1\nexpset events kick unpaid-orders --all"),
		kickOrDropCmd("drop", "delete dead letters for good",
			"expset events drop unpaid-orders 3/1732245000123-1\nexpset events drop unpaid-orders --all --yes"))
	return cmd
}

// eventsSet connects and opens set name with its recorded options, failing
// when it has no expiry events. tail gets a connection per shard, each
// blocked in a read, so it connects again with a pool that size once it
// knows the shard count. done closes the connection.
func (a *app) eventsSet(ctx context.Context, name string, perShard bool) (*expset.Set, func(), error) {
	cfg, c, err := a.connectSet(ctx, name, perShard)
	if err != nil {
		return nil, nil, err
	}
	set, err := expset.Open(ctx, c.rdb, name, expset.WithRecordedConfiguration(), expset.WithEvictingServer())
	if err == nil && !cfg.Events {
		err = fmt.Errorf("set %q was opened without WithExpiryEvents: it has no events", name)
	}
	if err != nil {
		c.close()
		return nil, nil, err
	}
	return set, c.close, nil
}

// connectSet connects and reads the set's configuration; with perShard,
// with a pool of a connection per shard.
func (a *app) connectSet(ctx context.Context, name string, perShard bool) (expset.Configuration, *conn, error) {
	c, err := a.connect(ctx, false)
	if err != nil {
		return expset.Configuration{}, nil, err
	}
	cfg, err := expset.ReadConfiguration(ctx, c.rdb, name)
	if err == nil && !perShard {
		return cfg, c, nil
	}
	c.close()
	if err != nil {
		return cfg, nil, noSet(err, name, c)
	}
	c, err = a.connectPool(ctx, false, cfg.Shards+2)
	return cfg, c, err
}

// eventJSON is what the JSON of an event and of a dead letter start with.
// A job's (Set.Put) has owner "" and its ID as member and job; a
// schedule's tick, its ID as member and schedule.
type eventJSON struct {
	Shard     int       `json:"shard"`
	ID        string    `json:"id"`
	Owner     string    `json:"owner"`
	OwnerB64  string    `json:"owner_base64,omitempty"` // the exact bytes, when they are not UTF-8
	Member    string    `json:"member"`
	MemberB64 string    `json:"member_base64,omitempty"`
	Job       string    `json:"job,omitempty"`
	Schedule  string    `json:"schedule,omitempty"`
	Deadline  time.Time `json:"deadline"`
}

func newEventJSON(shard int, id string, e expset.Expiry) eventJSON {
	j := eventJSON{Shard: shard, ID: id, Owner: e.Owner, OwnerB64: exact(e.Owner),
		Member: e.Member, MemberB64: exact(e.Member), Deadline: e.Deadline.UTC()}
	switch {
	case e.Owner != "":
	case e.Tick:
		j.Schedule = e.Member
	default:
		j.Job = e.Member
	}
	return j
}

// tailLine is one event as "events tail --json" prints it.
type tailLine struct {
	eventJSON
	Swept   time.Time `json:"swept"` // when the sweeper wrote it: the time in its ID
	Payload []byte    `json:"payload,omitempty"`
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
				if err := enc.Encode(tailLine{eventJSON: newEventJSON(e.Shard, e.ID, e), Swept: swept, Payload: e.Payload}); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(stdout, "%s shard=%d id=%s owner=%s member=%s deadline=%s late=%v payload=%dB\n",
				swept.Format("15:04:05.000"), e.Shard, e.ID, ownerText(e), printable(e.Member),
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
	eventJSON
	Attempts int       `json:"attempts"`
	Error    string    `json:"error"`
	ErrorB64 string    `json:"error_base64,omitempty"`
	Buried   time.Time `json:"buried"`
	Group    string    `json:"group"`
	Consumer string    `json:"consumer"`
	EventID  string    `json:"event_id"` // its ID in the event stream before it was buried
}

func toDeadLines(ds []expset.DeadLetter) []deadLine {
	out := make([]deadLine, 0, len(ds))
	for _, d := range ds {
		out = append(out, deadLine{eventJSON: newEventJSON(d.Shard, d.ID, d.Event), Attempts: d.Event.Attempt, Error: d.Error, ErrorB64: exact(d.Error), Buried: d.Buried.UTC(),
			Group: d.Group, Consumer: d.Consumer, EventID: d.Event.ID})
	}
	return out
}

// deadSel selects the dead letters "events dead" lists: one shard's (or
// every shard's, allShards), or one job's.
type deadSel struct {
	shard int
	job   string
}

func listDead(ctx context.Context, set *expset.Set, sel deadSel, limit int, asJSON bool, stdout io.Writer) error {
	var ds []expset.DeadLetter
	var err error
	if sel.job != "" {
		ds, err = set.JobDeadLetters(ctx, sel.job)
	} else {
		ds, err = set.DeadLetters(ctx, sel.shard, limit+1)
	}
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
		of := ""
		if sel.job != "" {
			of = fmt.Sprintf(" of job %s", printable(sel.job))
		}
		fmt.Fprintf(stdout, "no dead letters%s in set %s\n", of, set.Name())
		return nil
	}
	if err := printDead(stdout, ds, true); err != nil {
		return err
	}
	note := ""
	if more {
		note = fmt.Sprintf(" (the first %d; --limit to see more)", limit)
	}
	fmt.Fprintf(stdout, "\n%s%s; 'expset events kick %s ID...' re-queues them, 'expset events drop %s ID...' deletes them\n",
		deadLetters(len(ds)), note, set.Name(), set.Name())
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s", d.Shard, d.ID, ownerText(d.Event), printable(d.Event.Member))
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
func resolve(ctx context.Context, set *expset.Set, all []expset.DeadLetter, refs []deadRef) ([]expset.DeadLetter, error) {
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
			missing = append(missing, fmt.Sprintf("%s (in no shard's dead-letter stream, %s to %s)", r.id, deadKey(ctx, set, 0), deadKey(ctx, set, set.Shards()-1)))
		case len(found) == 0:
			missing = append(missing, fmt.Sprintf("%s in shard %d (%s)", r.id, r.shard, deadKey(ctx, set, r.shard)))
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

// deadPick names the dead letters "events kick|drop" acts on: those refs
// name, those of job, or (neither) all.
type deadPick struct {
	refs []deadRef
	job  string
}

// letters reads the dead letters p names, or fails changing nothing.
func (p deadPick) letters(ctx context.Context, set *expset.Set) ([]expset.DeadLetter, error) {
	if p.job != "" {
		return set.JobDeadLetters(ctx, p.job)
	}
	all, err := set.DeadLetters(ctx, allShards, 0)
	if err != nil || len(p.refs) == 0 {
		return all, err
	}
	return resolve(ctx, set, all, p.refs)
}

func kickOrDrop(ctx context.Context, set *expset.Set, action string, pick deadPick, asJSON bool, stdout io.Writer) error {
	letters, err := pick.letters(ctx, set)
	if err != nil {
		return err
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
	if n < len(letters) && (len(pick.refs) > 0 || pick.job != "") {
		// Another operator or process kicked or dropped some in between.
		return fmt.Errorf("%w: %d of the %d dead letters named were gone by the time of the %s", errNotFound, len(letters)-n, len(letters), action)
	}
	return nil
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// deadLetters says "1 dead letter", "2 dead letters".
func deadLetters(n int) string {
	if n == 1 {
		return "1 dead letter"
	}
	return strconv.Itoa(n) + " dead letters"
}

// deadKey names shard's dead-letter stream, as Set.Stats reports it, for
// error messages; "shard N's stream" when Stats fails.
func deadKey(ctx context.Context, set *expset.Set, shard int) string {
	st, err := set.Stats(ctx)
	if err != nil || shard < 0 || shard >= len(st) {
		return fmt.Sprintf("shard %d's stream", shard)
	}
	return st[shard].DeadLettersKey
}
