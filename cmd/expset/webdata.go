package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// What "expset web" reads, and how much at most. Every read is bounded: a
// page of dead letters reads the streams in steps of webScanBatch entries
// from an exclusive start (deadscan.lua: XRANGE with COUNT, the filter
// applied in Redis; internal/store/lua/deadscan.lua), counts them all with XLEN, and counts those a filter
// selects in the same pass as its first page, stopping after
// webCountBudget entries.
const (
	webPageSize       = 50               // dead letters or members on one page
	webScanBatch      = 1000             // stream entries one deadscan.lua reads (a few ms of the server)
	webPageBudget     = 100000           // entries a page reads before it offers to go on
	webCountBudget    = 1000000          // entries a filtered count reads before it says "at least"
	webCountKept      = 15 * time.Second // how long a filtered count serves the next pages
	webActionBatch    = 500              // dead letters kicked or deleted by one library call
	webOwnersShown    = 20               // owners listed on a set's page
	webSchedulesShown = 50               // schedules listed on a set's page
	webRunningShown   = 10               // owners with calls running listed per group
	webSampleEvery    = 2 * time.Second
	webSamplesKept    = 150 // five minutes of samples
	webMaxFilterText  = 1024
	webLagCount       = 1000 // entries counted per shard and group where Redis cannot tell the lag
)

// webSet is one set the page shows, opened once at start.
type webSet struct {
	name   string
	set    *expset.Set
	cfg    expset.Configuration
	st     *store.Store // the set's keys and reads
	events []string     // per shard: the expiry event stream's key
	dead   []string     // per shard: the dead-letter stream's key
	rates  rates
	counts countCache
}

// openWebSet opens the recorded set name and learns its stream keys.
func openWebSet(ctx context.Context, c *conn, name string) (*webSet, error) {
	set, err := openExisting(ctx, c, name)
	if err != nil {
		return nil, err
	}
	cfg, err := expset.ReadConfiguration(ctx, c.rdb, name)
	if err != nil {
		return nil, noSet(err, name, c)
	}
	w := &webSet{name: name, set: set, cfg: cfg,
		st: store.New(c.rdb, name, store.Options{Shards: cfg.Shards, Events: cfg.Events, Payloads: cfg.Payloads, Index: cfg.Index})}
	for _, k := range w.st.Shards() {
		w.events = append(w.events, k.Events)
		w.dead = append(w.dead, k.Dead)
	}
	return w, nil
}

// discoverSets lists the names of the sets recorded in Redis (their meta
// keys), on every master of a cluster, sorted. It scans the whole keyspace
// once.
func discoverSets(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	names, err := store.Sets(ctx, rdb)
	sort.Strings(names)
	return names, err
}

// groupRow is one consumer group over all shards of a set.
type groupRow struct {
	Name      string
	Pending   int64
	Lag       int64 // entries not yet delivered to the group, over the shards
	LagMore   bool  // a shard had more than webLagCount undelivered: Lag counts that many of it
	Shards    int   // shards whose stream has the group
	Consumers []consumerRow
	// With detail: the handler calls running under owner slots
	// (WithOwnerConcurrency), their owners (RunningMore: at least that
	// many), and the first webRunningShown owners, most calls first.
	Running       int64
	RunningOwners int64
	RunningMore   bool
	TopRunning    []expset.OwnerCalls
}

// consumerRow is one consumer of a group over all shards.
type consumerRow struct {
	Name    string
	Pending int64
	Idle    time.Duration // since its last read or claim, on the shard it touched last
}

// counters are cumulative counts read from the streams: events ever added
// (expiries), entries ever read by the groups (first deliveries to a
// handler) and dead letters ever added (handlers given up on).
type counters struct {
	At        time.Time
	Expiries  int64
	Delivered int64
	Buried    int64
	Known     bool // the server reports entries-added (Redis 7.0 and later; not miniredis)
}

// readGroups reads every shard's consumer groups and the stream counters
// (XINFO GROUPS and XINFO STREAM: one pipelined round trip) and, with
// detail, the groups' consumers and the lag Redis cannot tell (XINFO
// CONSUMERS, XRANGE of at most webLagCount+1 entries: one more).
func (w *webSet) readGroups(ctx context.Context, detail bool) ([]groupRow, counters, error) {
	cnt := counters{At: time.Now(), Known: true}
	if !w.cfg.Events {
		cnt.Known = false
		return nil, cnt, nil
	}
	shards, err := w.st.ReadStreamInfo(ctx, detail, webLagCount)
	if err != nil {
		return nil, cnt, err
	}
	byName := map[string]*groupRow{}
	for _, sh := range shards {
		if v := sh.Events; v != nil {
			cnt.Expiries += v.EntriesAdded
			cnt.Known = cnt.Known && (v.EntriesAdded > 0 || v.Length == 0)
		}
		if v := sh.Dead; v != nil {
			cnt.Buried += v.EntriesAdded
		}
		for _, x := range sh.Groups {
			row := byName[x.Name]
			if row == nil {
				row = &groupRow{Name: x.Name}
				byName[x.Name] = row
			}
			row.Shards++
			row.Pending += x.Pending
			cnt.Delivered += x.EntriesRead
			row.Lag += x.Lag
			row.LagMore = row.LagMore || x.LagMore
			row.addConsumers(x.Consumers)
		}
	}
	out := make([]groupRow, 0, len(byName))
	for _, r := range byName {
		sort.Slice(r.Consumers, func(a, b int) bool { return r.Consumers[a].Name < r.Consumers[b].Name })
		out = append(out, *r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	if detail {
		if err := w.readRunning(ctx, out); err != nil {
			return nil, cnt, err
		}
	}
	return out, cnt, nil
}

// addConsumers adds the consumers of one shard's stream to the group's,
// by name: their pending events summed, the least idle time kept.
func (g *groupRow) addConsumers(cs []redis.XInfoConsumer) {
	for _, x := range cs {
		idx := -1
		for j, r := range g.Consumers {
			if r.Name == x.Name {
				idx = j
			}
		}
		if idx < 0 {
			g.Consumers = append(g.Consumers, consumerRow{Name: x.Name, Idle: x.Idle})
			idx = len(g.Consumers) - 1
		}
		r := &g.Consumers[idx]
		r.Pending += x.Pending
		r.Idle = min(r.Idle, x.Idle)
	}
}

// readRunning fills in each group's handler calls running under owner
// slots (Set.Running: one pipelined round trip per group).
func (w *webSet) readRunning(ctx context.Context, groups []groupRow) error {
	for i := range groups {
		g := &groups[i]
		owners, err := w.set.Running(ctx, g.Name, maxRunningOwners)
		if errors.Is(err, expset.ErrNotFound) {
			continue // removed in between
		}
		if err != nil {
			return fmt.Errorf("read the calls running of %s: %w", g.Name, err)
		}
		for _, o := range owners {
			g.Running += o.Calls
		}
		g.RunningOwners = int64(len(owners))
		g.RunningMore = len(owners) == maxRunningOwners
		g.TopRunning = owners[:min(len(owners), webRunningShown)]
	}
	return nil
}

// rates keeps the last samples of a set's counters, to draw rates from.
type rates struct {
	mu      sync.Mutex
	samples []counters
	err     error // the last sample's error, nil once one succeeds again
}

func (r *rates) add(c counters, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	if err != nil {
		return
	}
	r.samples = append(r.samples, c)
	if len(r.samples) > webSamplesKept {
		r.samples = r.samples[len(r.samples)-webSamplesKept:]
	}
}

// ratePoint is one rate per second between two samples.
type ratePoint struct {
	At                          time.Time
	Expiries, Delivered, Buried float64
}

// series returns the rates between successive samples (a counter that went
// down, as after a Drop, gives 0), and the last sample's error.
func (r *rates) series() ([]ratePoint, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ratePoint
	known := len(r.samples) > 0
	for i := 1; i < len(r.samples); i++ {
		a, b := r.samples[i-1], r.samples[i]
		known = known && b.Known
		dt := b.At.Sub(a.At).Seconds()
		if dt <= 0 {
			continue
		}
		per := func(x, y int64) float64 { return float64(max(y-x, 0)) / dt }
		out = append(out, ratePoint{At: b.At, Expiries: per(a.Expiries, b.Expiries), Delivered: per(a.Delivered, b.Delivered), Buried: per(a.Buried, b.Buried)})
	}
	return out, known, r.err
}

// sample reads the counters of every set every webSampleEvery until ctx
// ends.
func sample(ctx context.Context, sets []*webSet) {
	t := time.NewTicker(webSampleEvery)
	defer t.Stop()
	for {
		for _, w := range sets {
			if w.cfg.Events {
				_, c, err := w.readGroups(ctx, false)
				w.rates.add(c, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ownerDue is an owner of the due index with its score (at or before its
// earliest deadline).
type ownerDue = store.DueOwner

// nextOwners returns up to n owners with the earliest scores in the due
// indexes (one pipelined ZRANGE per shard).
func (w *webSet) nextOwners(ctx context.Context, n int) ([]ownerDue, error) {
	out, err := w.st.NextDue(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("read the due indexes of %s: %w", w.name, err)
	}
	return out, nil
}

// memberRow is one member of an owner, as the page shows it.
type memberRow struct {
	ID           string
	Deadline     time.Time
	Left         time.Duration
	Expired      bool
	PayloadBytes int64
}

// ownerPage is a page of an owner's members, earliest deadline first.
type ownerPage struct {
	Owner   string
	Shard   int
	Key     string
	Count   int64
	Now     time.Time
	Offset  int
	Next    int // offset of the next page, 0 when none
	Members []memberRow
}

// readOwner reads a page of owner's members from offset (ZRANGE by rank,
// ZCARD, TIME and one HSTRLEN per member with payloads: two round trips).
func (w *webSet) readOwner(ctx context.Context, owner string, offset int) (ownerPage, error) {
	p := ownerPage{Owner: owner, Shard: w.set.ShardOf(owner), Key: w.set.OwnerKey(owner), Offset: offset}
	pg, err := w.st.ReadOwnerPage(ctx, owner, offset, webPageSize, w.cfg.Payloads)
	if err != nil {
		return p, err
	}
	p.Now, p.Count = pg.Now, pg.Count
	for _, e := range pg.Entries {
		r := memberRow{ID: e.ID, Deadline: e.Deadline, Left: e.Deadline.Sub(p.Now).Truncate(time.Millisecond), Expired: !e.Deadline.After(p.Now), PayloadBytes: e.PayloadBytes}
		p.Members = append(p.Members, r)
	}
	if int64(offset+webPageSize) < p.Count {
		p.Next = offset + webPageSize
	}
	return p, nil
}

// letter is a dead letter as the page shows it, read from the stream
// directly (fields a, id, g, c, err, o, m, d and maybe r and p).
type letter struct {
	Shard    int
	ID       string
	EventID  string
	Owner    string
	Member   string
	Group    string
	Consumer string
	Error    string
	Attempts string
	Deadline time.Time
	Buried   time.Time
	Evicted  bool
	Payload  []byte
	Fields   map[string]string // everything the entry holds
}

// Ref is the letter's reference in forms and links: "shard/ID".
func (l letter) Ref() string { return strconv.Itoa(l.Shard) + "/" + l.ID }

func parseLetter(shard int, m redis.XMessage) letter {
	l := letter{Shard: shard, ID: m.ID, Fields: map[string]string{}}
	for k, v := range m.Values {
		s, _ := v.(string)
		l.Fields[k] = s
	}
	f := l.Fields
	l.EventID, l.Owner, l.Member, l.Group, l.Consumer, l.Error, l.Attempts = f["id"], f["o"], f["m"], f["g"], f["c"], f["err"], f["a"]
	if ms, err := strconv.ParseInt(f["d"], 10, 64); err == nil {
		l.Deadline = time.UnixMilli(ms)
	}
	l.Evicted = f["r"] != "" && f["r"] != "0"
	if p, ok := f["p"]; ok {
		l.Payload = []byte(p)
	}
	l.Buried = idTime(m.ID)
	return l
}

// deadFilter selects dead letters: each field that is set must match.
type deadFilter struct {
	Group string // the group, exactly
	Owner string // the owner, exactly
	Err   string // text in the error, any case
	Shard int    // one shard, or -1 for every shard
}

func (f deadFilter) any() bool { return f.Group != "" || f.Owner != "" || f.Err != "" }

// cursor is a position among a set's dead letters: after ID in shard
// (ID "" is the shard's start). Written "shard/ID".
type cursor struct {
	Shard int
	ID    string
}

func (c cursor) String() string { return strconv.Itoa(c.Shard) + "/" + c.ID }

// parseRef reads "shard/ID" (ID may be empty, for a cursor at a shard's
// start) for a set of shards shards.
func parseRef(s string, shards int, emptyID bool) (cursor, error) {
	sh, id, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(sh)
	if !ok || err != nil || n < 0 || n >= shards || (id == "" && !emptyID) || (id != "" && (!streamID.MatchString(id) || len(id) > 41)) {
		return cursor{}, fmt.Errorf("%w: %q is not SHARD/ID (shard 0 to %d, ID ms-seq)", errUsage, s, shards-1)
	}
	return cursor{n, id}, nil
}

// filterDead reads the dead letters of the shards f selects from after, in
// shard order, with deadscan.lua (the filter runs in Redis: only matches
// travel), webScanBatch entries a call. It returns up to want matching
// letters, stopping after the last of them when stop is true, else reading
// on to count every match; it reads at most budget entries (0: no bound).
// upTo, when not nil, holds per shard the last ID to read ("" to skip the
// shard). It returns where the next page starts: after the want-th match,
// else after the last entry read; and whether it read to the end.
func (w *webSet) filterDead(ctx context.Context, f deadFilter, after cursor, want int, stop bool, budget int, upTo []string) (out []letter, matches int64, next cursor, done bool, err error) {
	pos := after
	defer func() {
		next = pos
		if want > 0 && len(out) == want {
			next = cursor{out[want-1].Shard, out[want-1].ID}
		}
	}()
	read := 0
	text := strings.ToLower(f.Err)
	for shard := after.Shard; shard < len(w.dead); shard++ {
		if f.Shard >= 0 && shard != f.Shard {
			continue
		}
		if shard != pos.Shard {
			pos = cursor{shard, ""}
		}
		end := "+"
		if upTo != nil {
			if end = upTo[shard]; end == "" {
				continue
			}
		}
		for {
			n := webScanBatch
			if budget > 0 {
				if n = min(n, budget-read); n <= 0 {
					return out, matches, pos, false, nil
				}
			}
			start := "-"
			if pos.ID != "" {
				start = "(" + pos.ID
			}
			r, err := w.st.ScanDead(ctx, store.DeadScan{Shard: shard, Start: start, End: end, Read: n, Want: want - len(out),
				Group: f.Group, Owner: f.Owner, Text: text, Stop: stop})
			if err != nil {
				return out, matches, pos, false, fmt.Errorf("read %s: %w", w.dead[shard], err)
			}
			got := r.Read
			read += got
			matches += r.Matches
			if r.Last != "" {
				pos.ID = r.Last
			}
			for _, e := range r.Entries {
				out = append(out, parseLetter(shard, e))
			}
			if stop && want > 0 && len(out) >= want {
				return out, matches, pos, false, nil
			}
			if got < n {
				break
			}
		}
	}
	return out, matches, pos, true, nil
}

// lastDeadIDs returns the newest dead letter's ID of every shard ("" for
// an empty one), in one pipelined round trip.
func (w *webSet) lastDeadIDs(ctx context.Context) ([]string, error) {
	out, err := w.st.LastDeadIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the dead-letter streams of %s: %w", w.name, err)
	}
	return out, nil
}

// deadPage is one page of dead letters.
type deadPage struct {
	Letters []letter
	Next    string // the cursor of the next page, "" at the end
	Total   int64  // dead letters in the shards selected
	Matches int64  // of them, those the filter selects (Total without one)
	AtLeast bool   // the count stopped after webCountBudget entries
	Scanned int    // entries this page read
	Stalled bool   // the page read webPageBudget entries without filling
}

// readDead reads a page of dead letters after from: XLEN per shard for the
// total, XRANGE with COUNT for the page, and with a filter a scan of at most
// webCountBudget entries to count the matches.
func (w *webSet) readDead(ctx context.Context, f deadFilter, from cursor) (deadPage, error) {
	var p deadPage
	lens, err := w.st.DeadLengths(ctx)
	if err != nil {
		return p, fmt.Errorf("count the dead letters of %s: %w", w.name, err)
	}
	for i, n := range lens {
		if f.Shard < 0 || f.Shard == i {
			p.Total += n
		}
	}
	p.Matches = p.Total
	first := from == cursor{max(f.Shard, 0), ""}
	if f.any() && first {
		// The first page and the count in one pass.
		letters, m, next, done, err := w.filterDead(ctx, f, from, webPageSize, false, webCountBudget, nil)
		if err != nil {
			return p, err
		}
		p.Letters, p.Matches, p.AtLeast = letters, m, !done
		if !done || m > int64(len(letters)) {
			p.Next = next.String()
		}
		w.counts.put(f, m, !done)
		return p, nil
	}
	letters, _, next, done, err := w.filterDead(ctx, f, from, webPageSize, true, webPageBudget, nil)
	if err != nil {
		return p, err
	}
	p.Letters = letters
	p.Stalled = !done && len(p.Letters) < webPageSize
	if !done {
		p.Next = next.String()
	}
	if f.any() {
		m, atLeast, ok := w.counts.get(f)
		if !ok {
			_, m, _, done, err = w.filterDead(ctx, f, cursor{max(f.Shard, 0), ""}, 0, false, webCountBudget, nil)
			if err != nil {
				return p, err
			}
			atLeast = !done
			w.counts.put(f, m, atLeast)
		}
		p.Matches, p.AtLeast = m, atLeast
	}
	return p, nil
}

// countCache keeps the counts of recent filters for webCountKept, so the
// next pages of a filter do not count again.
type countCache struct {
	mu sync.Mutex
	m  map[deadFilter]countEntry
}

type countEntry struct {
	n       int64
	atLeast bool
	at      time.Time
}

func (c *countCache) get(f deadFilter) (int64, bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[f]
	if !ok || time.Since(e.at) > webCountKept {
		return 0, false, false
	}
	return e.n, e.atLeast, true
}

// clear forgets every count (after a change).
func (c *countCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

func (c *countCache) put(f deadFilter, n int64, atLeast bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 100 {
		c.m = map[deadFilter]countEntry{}
	}
	c.m[f] = countEntry{n, atLeast, time.Now()}
}

// readLetter reads one dead letter, or fails with errNotFound.
func (w *webSet) readLetter(ctx context.Context, ref cursor) (letter, error) {
	m, found, err := w.st.DeadLetter(ctx, ref.Shard, ref.ID)
	if err != nil {
		return letter{}, fmt.Errorf("read %s: %w", w.dead[ref.Shard], err)
	}
	if !found {
		return letter{}, fmt.Errorf("%w: no dead letter %s in shard %d (kicked or deleted?)", errNotFound, ref.ID, ref.Shard)
	}
	return parseLetter(ref.Shard, m), nil
}

// act kicks (kick true) or deletes dead letters through the library, at most
// webActionBatch per call, and returns how many it found.
func (w *webSet) act(ctx context.Context, kick bool, refs []cursor) (int, error) {
	total := 0
	for len(refs) > 0 {
		batch := refs[:min(len(refs), webActionBatch)]
		refs = refs[len(batch):]
		ls := make([]expset.DeadLetter, len(batch))
		for i, r := range batch {
			ls[i] = expset.DeadLetter{Shard: r.Shard, ID: r.ID}
		}
		var n int
		var err error
		if kick {
			n, err = w.set.Kick(ctx, ls...)
		} else {
			n, err = w.set.DeleteDeadLetters(ctx, ls...)
		}
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// actMatching kicks or deletes every dead letter f selects that was there
// when it began (a kicked letter buried again meanwhile is left for the
// next time), scanning and acting in batches.
func (w *webSet) actMatching(ctx context.Context, kick bool, f deadFilter) (int, error) {
	upTo, err := w.lastDeadIDs(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	pos := cursor{max(f.Shard, 0), ""}
	for {
		letters, _, next, done, err := w.filterDead(ctx, f, pos, webActionBatch, true, 0, upTo)
		if err != nil {
			return total, err
		}
		refs := make([]cursor, len(letters))
		for i, l := range letters {
			refs[i] = cursor{l.Shard, l.ID}
		}
		n, err := w.act(ctx, kick, refs)
		total += n
		if err != nil || done {
			return total, err
		}
		pos = next
	}
}

// Name, Shards, Events and Payloads describe the set to the templates.
func (w *webSet) Name() string   { return w.name }
func (w *webSet) Shards() int    { return w.cfg.Shards }
func (w *webSet) Events() bool   { return w.cfg.Events }
func (w *webSet) Payloads() bool { return w.cfg.Payloads }
