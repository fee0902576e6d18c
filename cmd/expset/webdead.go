package main

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// The dead letters "expset web" shows: read from the streams directly,
// filtered in Redis (deadscan.lua) or, for one job's, through the library;
// kicked or deleted through the library.

// letter is a dead letter as the page shows it, read from the stream
// directly (fields a, id, g, c, err, o, m, d and maybe r and p).
type letter struct {
	Shard    int
	ID       string
	EventID  string
	Owner    string // "" for a job's or a schedule's
	Job      string // the ID of the job (Set.Put) it is of, or ""
	Schedule string // the ID of the schedule it is a tick of, or ""
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
	if strings.HasPrefix(l.Owner, jobOwnerPrefix) {
		// The owner the set keeps jobs or ticks under is no one's: show
		// the ID.
		if l.Owner == scheduleOwner {
			l.Schedule = l.Member
		} else {
			l.Job = l.Member
		}
		l.Owner = ""
		delete(l.Fields, "o")
	}
	return l
}

// deadFilter selects dead letters: each field that is set must match.
type deadFilter struct {
	Group string // the group, exactly
	Owner string // the owner, exactly
	Job   string // the job's ID (Set.Put), exactly
	Err   string // text in the error, any case
	Shard int    // one shard, or -1 for every shard
}

func (f deadFilter) any() bool { return f.Group != "" || f.Owner != "" || f.Job != "" || f.Err != "" }

// selects reports whether f selects l, as deadscan.lua would (the error's
// ASCII letters in any case).
func (f deadFilter) selects(l letter) bool {
	lower := func(s string) string {
		return strings.Map(func(r rune) rune {
			if 'A' <= r && r <= 'Z' {
				return r + 'a' - 'A'
			}
			return r
		}, s)
	}
	return (f.Group == "" || l.Group == f.Group) && (f.Owner == "" || l.Owner == f.Owner) && (f.Job == "" || l.Job == f.Job) &&
		(f.Shard < 0 || l.Shard == f.Shard) && strings.Contains(lower(l.Error), lower(f.Err))
}

// jobLetters reads the dead letters of job f.Job (Set.JobDeadLetters), then
// each as the page shows it (one pipelined XRANGE), keeping those the rest
// of f selects.
func (w *webSet) jobLetters(ctx context.Context, rdb redis.UniversalClient, f deadFilter) ([]letter, error) {
	ds, err := w.set.JobDeadLetters(ctx, f.Job)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(ds))
	for i, d := range ds {
		cmds[i] = pipe.XRangeN(ctx, w.dead[d.Shard], d.ID, d.ID, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read the dead letters of job %q: %w", f.Job, err)
	}
	var out []letter
	for i, c := range cmds {
		if ms := c.Val(); len(ms) == 1 {
			if l := parseLetter(ds[i].Shard, ms[0]); f.selects(l) {
				out = append(out, l)
			}
		}
	}
	return out, nil
}

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

//go:embed lua/deadscan.lua
var deadScanLua string

var deadScan = redis.NewScript(deadScanLua)

// filterDead reads the dead letters of the shards f selects from after, in
// shard order, with deadscan.lua (the filter runs in Redis: only matches
// travel), webScanBatch entries a call. It returns up to want matching
// letters, stopping after the last of them when stop is true, else reading
// on to count every match; it reads at most budget entries (0: no bound).
// upTo, when not nil, holds per shard the last ID to read ("" to skip the
// shard). It returns where the next page starts: after the want-th match,
// else after the last entry read; and whether it read to the end.
func (w *webSet) filterDead(ctx context.Context, rdb redis.UniversalClient, f deadFilter, after cursor, want int, stop bool, budget int, upTo []string) (out []letter, matches int64, next cursor, done bool, err error) {
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
			stopArg := "0"
			if stop {
				stopArg = "1"
			}
			v, err := deadScan.Run(ctx, rdb, []string{w.dead[shard]}, start, end, n, want-len(out), f.Group, f.Owner, text, stopArg).Result()
			if err != nil {
				return out, matches, pos, false, fmt.Errorf("read %s: %w", w.dead[shard], err)
			}
			last, got, m, entries, ok := parseDeadScan(v)
			if !ok {
				return out, matches, pos, false, fmt.Errorf("deadscan.lua on %s answered %v", w.dead[shard], v)
			}
			read += got
			matches += m
			if last != "" {
				pos.ID = last
			}
			for _, e := range entries {
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

// parseDeadScan reads deadscan.lua's reply.
func parseDeadScan(v any) (last string, read int, matches int64, entries []redis.XMessage, ok bool) {
	xs, ok := v.([]any)
	if !ok || len(xs) != 4 {
		return "", 0, 0, nil, false
	}
	last, ok1 := xs[0].(string)
	n, ok2 := xs[1].(int64)
	m, ok3 := xs[2].(int64)
	es, ok4 := xs[3].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return "", 0, 0, nil, false
	}
	for _, e := range es {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return "", 0, 0, nil, false
		}
		id, ok1 := pair[0].(string)
		fields, ok2 := pair[1].([]any)
		if !ok1 || !ok2 || len(fields)%2 != 0 {
			return "", 0, 0, nil, false
		}
		msg := redis.XMessage{ID: id, Values: make(map[string]any, len(fields)/2)}
		for i := 0; i < len(fields); i += 2 {
			k, _ := fields[i].(string)
			msg.Values[k] = fields[i+1]
		}
		entries = append(entries, msg)
	}
	return last, int(n), m, entries, true
}

// lastDeadIDs returns the newest dead letter's ID of every shard ("" for
// an empty one), in one pipelined round trip.
func (w *webSet) lastDeadIDs(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(w.dead))
	for i, k := range w.dead {
		cmds[i] = pipe.XRevRangeN(ctx, k, "+", "-", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read the dead-letter streams of %s: %w", w.name, err)
	}
	out := make([]string, len(cmds))
	for i, c := range cmds {
		if v := c.Val(); len(v) == 1 {
			out[i] = v[0].ID
		}
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
func (w *webSet) readDead(ctx context.Context, rdb redis.UniversalClient, f deadFilter, from cursor) (deadPage, error) {
	var p deadPage
	pipe := rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(w.dead))
	for i, k := range w.dead {
		lens[i] = pipe.XLen(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return p, fmt.Errorf("count the dead letters of %s: %w", w.name, err)
	}
	for i, c := range lens {
		if f.Shard < 0 || f.Shard == i {
			p.Total += c.Val()
		}
	}
	p.Matches = p.Total
	if f.Job != "" {
		// A job's dead letters are few (one per group and put): one page.
		var err error
		p.Letters, err = w.jobLetters(ctx, rdb, f)
		p.Matches = int64(len(p.Letters))
		return p, err
	}
	first := from == cursor{max(f.Shard, 0), ""}
	if f.any() && first {
		// The first page and the count in one pass.
		letters, m, next, done, err := w.filterDead(ctx, rdb, f, from, webPageSize, false, webCountBudget, nil)
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
	letters, _, next, done, err := w.filterDead(ctx, rdb, f, from, webPageSize, true, webPageBudget, nil)
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
			_, m, _, done, err = w.filterDead(ctx, rdb, f, cursor{max(f.Shard, 0), ""}, 0, false, webCountBudget, nil)
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
func (w *webSet) readLetter(ctx context.Context, rdb redis.UniversalClient, ref cursor) (letter, error) {
	msgs, err := rdb.XRangeN(ctx, w.dead[ref.Shard], ref.ID, ref.ID, 1).Result()
	if err != nil {
		return letter{}, fmt.Errorf("read %s: %w", w.dead[ref.Shard], err)
	}
	if len(msgs) == 0 {
		return letter{}, fmt.Errorf("%w: no dead letter %s in shard %d (kicked or deleted?)", errNotFound, ref.ID, ref.Shard)
	}
	return parseLetter(ref.Shard, msgs[0]), nil
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
func (w *webSet) actMatching(ctx context.Context, rdb redis.UniversalClient, kick bool, f deadFilter) (int, error) {
	if f.Job != "" {
		letters, err := w.jobLetters(ctx, rdb, f)
		if err != nil {
			return 0, err
		}
		refs := make([]cursor, len(letters))
		for i, l := range letters {
			refs[i] = cursor{l.Shard, l.ID}
		}
		return w.act(ctx, kick, refs)
	}
	upTo, err := w.lastDeadIDs(ctx, rdb)
	if err != nil {
		return 0, err
	}
	total := 0
	pos := cursor{max(f.Shard, 0), ""}
	for {
		letters, _, next, done, err := w.filterDead(ctx, rdb, f, pos, webActionBatch, true, 0, upTo)
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
