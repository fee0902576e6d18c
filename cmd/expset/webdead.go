package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// The dead letters "expset web" shows: read from the streams through the
// set's store, filtered in Redis (deadscan.lua); kicked or deleted through
// the library.

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
	if store.IsJobOwner(l.Owner) {
		// The owner the set keeps jobs or ticks under is no one's: show
		// the ID.
		if l.Owner == store.ScheduleOwner {
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

// scan returns the deadscan.lua step of f from start to end in shard, to
// read n entries and return want; ok is false when f selects nothing in
// shard. A job's dead letters are those of its bucket, in its shard, with
// its ID as member; no owner the page shows is a job's.
func (w *webSet) scan(f deadFilter, shard int, start, end string, n, want int, stop bool) (a store.DeadScan, ok bool) {
	a = store.DeadScan{Shard: shard, Start: start, End: end, Read: n, Want: want,
		Group: f.Group, Owner: f.Owner, Text: strings.ToLower(f.Err), Stop: stop}
	if store.IsJobOwner(f.Owner) {
		return a, false
	}
	if f.Job != "" {
		js, bucket := w.st.JobBucket(f.Job)
		if f.Owner != "" || js != shard {
			return a, false
		}
		a.Owner, a.Member = bucket, f.Job
	}
	return a, true
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
			a, ok := w.scan(f, shard, start, end, n, want-len(out), stop)
			if !ok {
				break
			}
			r, err := w.st.ScanDead(ctx, a)
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
