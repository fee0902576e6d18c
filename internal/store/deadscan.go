package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// deadscan.go serves deadscan.lua: one bounded step through a shard's
// dead-letter stream keeping the entries a filter selects (the dead
// letters of "expset web", and those of one job for Set.JobDeadLetters).

// DeadScan is one deadscan.lua step's arguments.
type DeadScan struct {
	Shard  int
	Start  string // "-" or "(ID" (after ID)
	End    string // "+" or an ID (inclusive)
	Read   int    // entries to read at most (1 to 10000)
	Want   int    // matching entries to return at most (0: none)
	Group  string // the group, exactly ("" for any)
	Owner  string // the owner, exactly ("" for any)
	Member string // the member, exactly ("" for any)
	Text   string // text the error holds, lower case ("" for any)
	Stop   bool   // stop reading at the last entry returned, else read on counting the matches
}

// DeadScanned is deadscan.lua's reply: the last ID read ("" when none),
// the entries read, the matches, and the matching entries returned.
type DeadScanned struct {
	Last    string
	Read    int
	Matches int64
	Entries []redis.XMessage
}

// deadScanCall builds deadscan.lua's call for a.
func (s *Store) deadScanCall(a DeadScan) *Call {
	stop := "0"
	if a.Stop {
		stop = "1"
	}
	return &Call{Op: "deadscan", Shard: a.Shard, Script: scriptDeadScan, Keys: []string{s.shards[a.Shard].Dead},
		Args: []any{a.Start, a.End, a.Read, a.Want, a.Group, a.Owner, a.Text, stop, a.Member}}
}

// readDeadScan reads deadscan.lua's reply: {last, read, matches, {{ID,
// {field, value, ...}}, ...}}.
func readDeadScan(v any) (DeadScanned, error) {
	xs, ok := v.([]any)
	if !ok || len(xs) != 4 {
		return DeadScanned{}, Unexpected("deadscan.lua", v)
	}
	last, ok1 := xs[0].(string)
	n, ok2 := xs[1].(int64)
	m, ok3 := xs[2].(int64)
	es, ok4 := xs[3].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return DeadScanned{}, Unexpected("deadscan.lua", v)
	}
	r := DeadScanned{Last: last, Read: int(n), Matches: m}
	for _, e := range es {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			return DeadScanned{}, Unexpected("deadscan.lua", v)
		}
		id, ok1 := pair[0].(string)
		fields, ok2 := pair[1].([]any)
		if !ok1 || !ok2 || len(fields)%2 != 0 {
			return DeadScanned{}, Unexpected("deadscan.lua", v)
		}
		msg := redis.XMessage{ID: id, Values: make(map[string]any, len(fields)/2)}
		for i := 0; i < len(fields); i += 2 {
			k, _ := fields[i].(string)
			msg.Values[k] = fields[i+1]
		}
		r.Entries = append(r.Entries, msg)
	}
	return r, nil
}

// ScanDead runs deadscan.lua for a. It is not reported to OnCall, and its
// error is Redis's own: the caller says what it was reading.
func (s *Store) ScanDead(ctx context.Context, a DeadScan) (DeadScanned, error) {
	c := s.deadScanCall(a)
	v, err := c.Script.Run(ctx, s.rdb, c.Keys, c.Args...).Result()
	if err != nil {
		return DeadScanned{}, err
	}
	return readDeadScan(v)
}

// JobDeadLetters reads the dead letters of the job with ID id of owner
// ("": none), oldest first: the entries of its shard's dead-letter stream
// under its owner (its bucket without one) with id as member, kept by
// deadscan.lua (only they travel), JobScanCount entries a call. Its error
// names the stream.
func (s *Store) JobDeadLetters(ctx context.Context, owner, id string) (shard int, msgs []redis.XMessage, err error) {
	shard, owner, _ = s.jobKeys(owner, id)
	for start := "-"; ; {
		r, err := s.ScanDead(ctx, DeadScan{Shard: shard, Start: start, End: "+", Read: JobScanCount, Want: JobScanCount, Owner: owner, Member: id})
		if err != nil {
			return shard, msgs, fmt.Errorf("read %s: %w", s.shards[shard].Dead, err)
		}
		msgs = append(msgs, r.Entries...)
		if r.Read < JobScanCount {
			return shard, msgs, nil
		}
		start = "(" + r.Last
	}
}
