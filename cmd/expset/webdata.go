package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
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
	webRunningShown   = 10               // calls running listed per group, the oldest
	webPausedShown    = 100              // owners paused listed per group, the first by their bytes
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
	// With detail: the handler calls running, their owners, the pending
	// events no call has (Set.Running), and the webRunningShown oldest
	// calls, the oldest first.
	Running       int64
	RunningOwners int64
	HeldBack      int64
	Calls         []expset.RunningCall
	// With detail: the group paused (Set.Pause), and how many owners are
	// paused in it; what they hold back counts in HeldBack. With owners
	// paused: the first webPausedShown of them (Set.PausedOwners), and how
	// many more there are.
	Paused       bool
	PausedOwners int64
	PausedShown  []string
	PausedMore   int64
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
		var err error
		if out, err = w.readPauses(ctx, out); err != nil {
			return nil, cnt, err
		}
	}
	return out, cnt, nil
}

// readPauses fills in each group's pause, adds a row for each group paused
// (or with owners paused) that no stream has yet (Set.Groups lists those
// too), sorted in by name, and, for each group with owners paused, reads
// the first webPausedShown of them (Set.PausedOwners: a scan of the
// attempts hashes of the shards that have some). The pauses cost a round
// trip per 1000 fields of the largest attempts hash (store.Pauses).
func (w *webSet) readPauses(ctx context.Context, groups []groupRow) ([]groupRow, error) {
	ps, err := w.st.Pauses(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the pauses of %s's groups: %w", w.name, err)
	}
	listed := make(map[string]bool, len(groups))
	for _, g := range groups {
		listed[g.Name] = true
	}
	added := false
	for name := range ps {
		if !listed[name] {
			groups = append(groups, groupRow{Name: name})
			added = true
		}
	}
	if added {
		sort.Slice(groups, func(a, b int) bool { return groups[a].Name < groups[b].Name })
	}
	for i := range groups {
		g := &groups[i]
		p := ps[g.Name]
		g.Paused, g.PausedOwners = p.Group, p.Owners
		if p.Owners == 0 {
			continue
		}
		owners, err := w.set.PausedOwners(ctx, g.Name)
		if err != nil {
			return nil, fmt.Errorf("read the owners paused in %s: %w", g.Name, err)
		}
		if n := len(owners); n > webPausedShown {
			owners, g.PausedMore = owners[:webPausedShown], int64(n-webPausedShown)
		}
		g.PausedShown = owners
	}
	return groups, nil
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

// readRunning fills in each group's handler calls running (Set.Running:
// one pipelined round trip per group).
func (w *webSet) readRunning(ctx context.Context, groups []groupRow) error {
	for i := range groups {
		g := &groups[i]
		r, err := w.set.Running(ctx, g.Name, webRunningShown)
		if errors.Is(err, expset.ErrNotFound) {
			continue // removed in between
		}
		if err != nil {
			return fmt.Errorf("read the calls running of %s: %w", g.Name, err)
		}
		g.Running, g.RunningOwners, g.HeldBack, g.Calls = r.Running, r.Owners, r.HeldBack, r.Calls
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
// indexes, leaving out those jobs and schedules are kept under (NextDue).
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

// Name, Shards, Events and Payloads describe the set to the templates.
func (w *webSet) Name() string   { return w.name }
func (w *webSet) Shards() int    { return w.cfg.Shards }
func (w *webSet) Events() bool   { return w.cfg.Events }
func (w *webSet) Payloads() bool { return w.cfg.Payloads }
