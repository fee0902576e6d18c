package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// What "expset web" reads, and how much at most. Every read is bounded: a
// page of dead letters reads the streams in steps of webScanBatch entries
// from an exclusive start (deadscan.lua: XRANGE with COUNT, the filter
// applied in Redis), counts them all with XLEN, and counts those a filter
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
	events []string // per shard: the expiry event stream's key
	dead   []string // per shard: the dead-letter stream's key
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
	st, err := set.Stats(ctx)
	if err != nil {
		return nil, err
	}
	w := &webSet{name: name, set: set, cfg: cfg}
	for _, s := range st {
		w.events = append(w.events, s.EventsKey)
		w.dead = append(w.dead, s.DeadLettersKey)
	}
	return w, nil
}

// payloadKey is the key of owner's payload hash (the key layout in keys.go
// of the library: the owner key with p: in place of o:).
func (w *webSet) payloadKey(owner string) string {
	return fmt.Sprintf("expset:{%s:%d}:p:%s", w.name, w.set.ShardOf(owner), owner)
}

// discoverSets lists the names of the sets recorded in Redis (their meta
// keys), on every master of a cluster. It scans the whole keyspace once.
func discoverSets(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	var (
		mu    sync.Mutex
		names []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, "expset:{*}:meta", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			name := strings.TrimSuffix(strings.TrimPrefix(k, "expset:{"), "}:meta")
			if name != k && !strings.ContainsAny(name, "{}") {
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	sort.Strings(names)
	return names, err
}

// noKey reports whether err is Redis saying a stream is not there (XINFO of
// a missing key).
func noKey(err error) bool {
	return redis.HasErrorPrefix(err, "no such key")
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
func (w *webSet) readGroups(ctx context.Context, rdb redis.UniversalClient, detail bool) ([]groupRow, counters, error) {
	cnt := counters{At: time.Now(), Known: true}
	if !w.cfg.Events {
		cnt.Known = false
		return nil, cnt, nil
	}
	pipe := rdb.Pipeline()
	groups := make([]*redis.XInfoGroupsCmd, len(w.events))
	evInfo := make([]*redis.XInfoStreamCmd, len(w.events))
	deadInfo := make([]*redis.XInfoStreamCmd, len(w.events))
	for i := range w.events {
		groups[i] = pipe.XInfoGroups(ctx, w.events[i])
		evInfo[i] = pipe.XInfoStream(ctx, w.events[i])
		deadInfo[i] = pipe.XInfoStream(ctx, w.dead[i])
	}
	_, _ = pipe.Exec(ctx) // a missing stream fails its XINFO: read per command
	byName := map[string]*groupRow{}
	type gc struct {
		row  *groupRow
		cmds *redis.XInfoConsumersCmd
		lag  *redis.XMessageSliceCmd // where Redis cannot tell the lag
	}
	var cons []gc
	pipe = rdb.Pipeline()
	for i := range w.events {
		for _, c := range []*redis.XInfoStreamCmd{evInfo[i], deadInfo[i]} {
			if err := c.Err(); err != nil && !noKey(err) {
				return nil, cnt, fmt.Errorf("read %s: %w", c.Args()[2], err)
			}
		}
		if v := evInfo[i].Val(); v != nil {
			cnt.Expiries += v.EntriesAdded
			cnt.Known = cnt.Known && (v.EntriesAdded > 0 || v.Length == 0)
		}
		if v := deadInfo[i].Val(); v != nil {
			cnt.Buried += v.EntriesAdded
		}
		g := groups[i]
		if err := g.Err(); err != nil {
			if noKey(err) {
				continue
			}
			return nil, cnt, fmt.Errorf("read %s: %w", w.events[i], err)
		}
		for _, x := range g.Val() {
			row := byName[x.Name]
			if row == nil {
				row = &groupRow{Name: x.Name}
				byName[x.Name] = row
			}
			row.Shards++
			row.Pending += x.Pending
			cnt.Delivered += x.EntriesRead
			if !detail {
				continue
			}
			c := gc{row: row, cmds: pipe.XInfoConsumers(ctx, w.events[i], x.Name)}
			if x.Lag >= 0 {
				row.Lag += x.Lag
			} else {
				// Entries were deleted (every group had them): Redis does
				// not count what is left after last-delivered-id; count it,
				// up to webLagCount.
				c.lag = pipe.XRangeN(ctx, w.events[i], "("+x.LastDeliveredID, "+", webLagCount+1)
			}
			cons = append(cons, c)
		}
	}
	if len(cons) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	for _, c := range cons {
		if c.lag != nil {
			n := int64(len(c.lag.Val()))
			if n > webLagCount {
				n = webLagCount
				c.row.LagMore = true
			}
			c.row.Lag += n
		}
		if err := c.cmds.Err(); err != nil {
			if noKey(err) || redis.HasErrorPrefix(err, "NOGROUP") {
				continue // deleted in between
			}
			return nil, cnt, fmt.Errorf("read the consumers of %s: %w", c.row.Name, err)
		}
		for _, x := range c.cmds.Val() {
			idx := -1
			for j, r := range c.row.Consumers {
				if r.Name == x.Name {
					idx = j
				}
			}
			if idx < 0 {
				c.row.Consumers = append(c.row.Consumers, consumerRow{Name: x.Name, Idle: x.Idle})
				idx = len(c.row.Consumers) - 1
			}
			r := &c.row.Consumers[idx]
			r.Pending += x.Pending
			r.Idle = min(r.Idle, x.Idle)
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
func sample(ctx context.Context, rdb redis.UniversalClient, sets []*webSet) {
	t := time.NewTicker(webSampleEvery)
	defer t.Stop()
	for {
		for _, w := range sets {
			if w.cfg.Events {
				_, c, err := w.readGroups(ctx, rdb, false)
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
type ownerDue struct {
	Owner string
	Shard int
	Due   time.Time
}

// webDueRounds bounds the reads of a shard's due index nextOwners makes to
// pass the jobs' and schedules' owners ahead of the first owners.
const webDueRounds = 50

// nextOwners returns up to n owners with the earliest scores in the due
// indexes, leaving out those the set keeps jobs and schedules under: one
// pipelined ZRANGE of n entries per shard, and more rounds, of the shards
// whose first entries were those, up to webDueRounds.
func (w *webSet) nextOwners(ctx context.Context, rdb redis.UniversalClient, st []expset.ShardStats, n int) ([]ownerDue, error) {
	var out []ownerDue
	found := make([]int, len(st))
	open := make([]int, len(st))
	for i := range open {
		open[i] = i
	}
	for round := 0; round < webDueRounds && len(open) > 0; round++ {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.ZSliceCmd, len(open))
		for j, i := range open {
			// The due index's key sits beside the event stream's: expset:{name:S}:due.
			from := int64(round * n)
			cmds[j] = pipe.ZRangeWithScores(ctx, strings.TrimSuffix(st[i].EventsKey, "ev")+"due", from, from+int64(n-1))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read the due indexes of %s: %w", w.name, err)
		}
		var next []int
		for j, i := range open {
			for _, z := range cmds[j].Val() {
				if o, _ := z.Member.(string); !strings.HasPrefix(o, jobOwnerPrefix) {
					out = append(out, ownerDue{Owner: o, Shard: i, Due: time.UnixMilli(int64(z.Score))})
					found[i]++
				}
			}
			if len(cmds[j].Val()) == n && found[i] < n {
				next = append(next, i)
			}
		}
		open = next
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Due.Before(out[b].Due) })
	return out[:min(n, len(out))], nil
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
func (w *webSet) readOwner(ctx context.Context, rdb redis.UniversalClient, owner string, offset int) (ownerPage, error) {
	p := ownerPage{Owner: owner, Shard: w.set.ShardOf(owner), Key: w.set.OwnerKey(owner), Offset: offset}
	pipe := rdb.Pipeline()
	now := pipe.Time(ctx)
	count := pipe.ZCard(ctx, p.Key)
	zs := pipe.ZRangeWithScores(ctx, p.Key, int64(offset), int64(offset+webPageSize-1))
	if _, err := pipe.Exec(ctx); err != nil {
		return p, fmt.Errorf("read %s: %w", p.Key, err)
	}
	p.Now, p.Count = now.Val(), count.Val()
	var sizes []*redis.IntCmd
	if w.cfg.Payloads && len(zs.Val()) > 0 {
		pipe = rdb.Pipeline()
		for _, z := range zs.Val() {
			m, _ := z.Member.(string)
			sizes = append(sizes, pipe.HStrLen(ctx, w.payloadKey(owner), m))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return p, fmt.Errorf("read %s: %w", w.payloadKey(owner), err)
		}
	}
	for i, z := range zs.Val() {
		m, _ := z.Member.(string)
		d := time.UnixMilli(int64(z.Score))
		r := memberRow{ID: m, Deadline: d, Left: d.Sub(p.Now).Truncate(time.Millisecond), Expired: !d.After(p.Now)}
		if sizes != nil {
			r.PayloadBytes = sizes[i].Val()
		}
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
