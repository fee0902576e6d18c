package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// views.go holds the operator's reads of the layout that no script serves:
// what the expset command's inspect and web pages show of owners, due
// indexes and dead-letter streams. Their errors are Redis's own (but
// ReadOwnerPage's), for the caller to say what it was reading.

// Entry is one member of an owner's sorted set as stored: expired or not,
// with its deadline and, where asked, its payload's size in bytes.
type Entry struct {
	ID           string
	Deadline     time.Time
	PayloadBytes int64
}

// ServerTime reads the server's clock (TIME).
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	return s.rdb.Time(ctx).Result()
}

// OwnerEntries reads at most n members of owner's sorted set from rank
// offset, earliest deadline first, expired ones included (ZRANGE by rank).
func (s *Store) OwnerEntries(ctx context.Context, owner string, offset, n int) ([]Entry, error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, s.OwnerKey(owner), int64(offset), int64(offset+n-1)).Result()
	if err != nil {
		return nil, err
	}
	return entries(zs), nil
}

// entries reads a sorted set's members and scores (deadlines in ms).
func entries(zs []redis.Z) []Entry {
	out := make([]Entry, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		out = append(out, Entry{ID: m, Deadline: time.UnixMilli(int64(z.Score))})
	}
	return out
}

// OwnerPage is a page of an owner's members read by ReadOwnerPage.
type OwnerPage struct {
	Now     time.Time // the server's clock
	Count   int64     // members of the owner, expired ones included
	Entries []Entry
}

// ReadOwnerPage reads at most n members of owner from rank offset, with
// the server's TIME and the owner's member count (one pipeline), and with
// payloads their payloads' sizes (HSTRLEN: one more). Its errors say "read
// <key>: ".
func (s *Store) ReadOwnerPage(ctx context.Context, owner string, offset, n int, payloads bool) (OwnerPage, error) {
	key := s.OwnerKey(owner)
	pipe := s.rdb.Pipeline()
	now := pipe.Time(ctx)
	count := pipe.ZCard(ctx, key)
	zs := pipe.ZRangeWithScores(ctx, key, int64(offset), int64(offset+n-1))
	if _, err := pipe.Exec(ctx); err != nil {
		return OwnerPage{}, fmt.Errorf("read %s: %w", key, err)
	}
	p := OwnerPage{Now: now.Val(), Count: count.Val(), Entries: entries(zs.Val())}
	if !payloads || len(p.Entries) == 0 {
		return p, nil
	}
	pk := s.shards[s.ShardOf(owner)].PayloadKey(owner)
	pipe = s.rdb.Pipeline()
	sizes := make([]*redis.IntCmd, len(p.Entries))
	for i, e := range p.Entries {
		sizes[i] = pipe.HStrLen(ctx, pk, e.ID)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return p, fmt.Errorf("read %s: %w", pk, err)
	}
	for i := range p.Entries {
		p.Entries[i].PayloadBytes = sizes[i].Val()
	}
	return p, nil
}

// DueOwner is an owner in a shard's due index and its score there (a time
// at or before its earliest deadline).
type DueOwner struct {
	Owner string
	Shard int
	Due   time.Time
}

// nextDueRounds bounds the reads of a shard's due index NextDue makes to
// pass the owners of jobs and schedules ahead of the first owners.
const nextDueRounds = 50

// NextDue reads the n owners with the earliest scores over every shard's
// due index, earliest first, leaving out the owners jobs and schedules are
// kept under (IsJobOwner): one pipelined ZRANGE of n entries per shard, and
// more rounds, of the shards whose entries read were those, up to
// nextDueRounds.
func (s *Store) NextDue(ctx context.Context, n int) ([]DueOwner, error) {
	var out []DueOwner
	found := make([]int, len(s.shards))
	open := make([]int, len(s.shards))
	for i := range open {
		open[i] = i
	}
	for round := 0; round < nextDueRounds && len(open) > 0; round++ {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.ZSliceCmd, len(open))
		from := int64(round * n)
		for j, i := range open {
			cmds[j] = pipe.ZRangeWithScores(ctx, s.shards[i].Due, from, from+int64(n-1))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		var next []int
		for j, i := range open {
			for _, z := range cmds[j].Val() {
				if o, _ := z.Member.(string); !IsJobOwner(o) {
					out = append(out, DueOwner{Owner: o, Shard: i, Due: time.UnixMilli(int64(z.Score))})
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

// DeadLengths reads the length of every shard's dead-letter stream (XLEN,
// pipelined).
func (s *Store) DeadLengths(ctx context.Context) ([]int64, error) {
	pipe := s.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(s.shards))
	for i, sk := range s.shards {
		lens[i] = pipe.XLen(ctx, sk.Dead)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]int64, len(lens))
	for i, c := range lens {
		out[i] = c.Val()
	}
	return out, nil
}

// LastDeadIDs reads the newest dead letter's ID of every shard ("" for an
// empty one), pipelined.
func (s *Store) LastDeadIDs(ctx context.Context) ([]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(s.shards))
	for i, sk := range s.shards {
		cmds[i] = pipe.XRevRangeN(ctx, sk.Dead, "+", "-", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]string, len(cmds))
	for i, c := range cmds {
		if v := c.Val(); len(v) == 1 {
			out[i] = v[0].ID
		}
	}
	return out, nil
}

// DeadLetter reads the entry id of shard's dead-letter stream; found is
// false when it is not there.
func (s *Store) DeadLetter(ctx context.Context, shard int, id string) (m redis.XMessage, found bool, err error) {
	msgs, err := s.rdb.XRangeN(ctx, s.shards[shard].Dead, id, id, 1).Result()
	if err != nil || len(msgs) == 0 {
		return redis.XMessage{}, false, err
	}
	return msgs[0], true, nil
}
