package expset

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dead letters: the events that failed every attempt Consume allowed, read
// (DeadLetters, JobDeadLetters), put back (Kick) or deleted
// (DeleteDeadLetters).

// DeadLetter is an expiry event that failed every attempt Consume allowed
// (WithMaxAttempts) and now waits in its shard's dead-letter stream until it
// is kicked back (Kick) or deleted (DeleteDeadLetters).
type DeadLetter struct {
	Shard    int
	ID       string    // the dead letter's ID in the shard's dead-letter stream
	Event    Expiry    // the event; Attempt is the number of deliveries it had, ID its former ID; a job's has Owner "" and its ID as Member
	Group    string    // the consumer group that gave up on it
	Consumer string    // the consumer that buried it
	Error    string    // the last handler error, or why it was never acknowledged
	Buried   time.Time // when it was buried (the server's clock), to the millisecond
}

// DeadLetters returns up to count dead letters (count <= 0: all) of one
// shard, or of every shard with shard -1, oldest first within a shard and
// in shard order.
func (s *Set) DeadLetters(ctx context.Context, shard, count int) ([]DeadLetter, error) {
	if err := s.opened(); err != nil {
		return nil, err
	}
	lo, hi, err := s.shardRange(shard)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	for i := lo; i < hi; i++ {
		left := int64(count - len(out))
		if count > 0 && left <= 0 {
			break
		}
		if count <= 0 {
			left = 0
		}
		msgs, err := s.st.DeadLetters(ctx, i, left)
		if err != nil {
			return out, err
		}
		if out, err = appendDeadLetters(out, i, msgs); err != nil {
			return out, err
		}
	}
	return out, nil
}

// JobDeadLetters returns the dead letters of the job id (Set.Put), oldest
// first: one per consumer group that gave up on it, for every put of the ID
// dead-lettered and not yet kicked or deleted; none for a job never
// dead-lettered. Each has the Event a handler got: Owner "" (or the job's
// owner), Member id. Kick and DeleteDeadLetters take them as they are.
// Options: WithOwner (the job of an owner; a member of that owner
// dead-lettered is listed too, as it is the same member). It fails with
// ErrInvalidArgument for an ID or owner Put would refuse, or a set without
// expiry events. Cost: it reads the dead-letter stream of the job's shard
// in Redis, one round trip per 1,000 dead letters there; only the job's
// travel.
func (s *Set) JobDeadLetters(ctx context.Context, id string, opts ...JobOption) ([]DeadLetter, error) {
	if _, err := s.checkJob(id, 0, false); err != nil {
		return nil, err
	}
	owner, err := jobOwner(opts)
	if err != nil {
		return nil, err
	}
	shard, msgs, err := s.st.JobDeadLetters(ctx, owner, id)
	if err != nil {
		return nil, fmt.Errorf("expset: read the dead letters of %s: %w", jobName(owner, id), err)
	}
	return appendDeadLetters(nil, shard, msgs)
}

// appendDeadLetters appends the dead letters msgs of shard to out, up to
// the first malformed one.
func appendDeadLetters(out []DeadLetter, shard int, msgs []redis.XMessage) ([]DeadLetter, error) {
	for _, m := range msgs {
		d, err := parseDeadLetter(shard, m)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (s *Set) shardRange(shard int) (lo, hi int, err error) {
	switch {
	case shard == allShards:
		return 0, len(s.shards), nil
	case shard < 0 || shard >= len(s.shards):
		return 0, 0, fmt.Errorf("%w: shard %d (want 0 to %d, or -1 for all)", ErrInvalidArgument, shard, len(s.shards)-1)
	}
	return shard, shard + 1, nil
}

func parseDeadLetter(shard int, m redis.XMessage) (DeadLetter, error) {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	a, err := strconv.Atoi(str("a"))
	if err != nil {
		return DeadLetter{}, fmt.Errorf("%w: malformed dead letter %s: %v", errUnexpectedReply, m.ID, m.Values)
	}
	e, err := parseExpiry(shard, redis.XMessage{ID: str("id"), Values: m.Values}, a)
	if err != nil {
		return DeadLetter{}, err
	}
	d := DeadLetter{Shard: shard, ID: m.ID, Event: e, Group: str("g"), Consumer: str("c"), Error: str("err")}
	if ms, _, ok := strings.Cut(m.ID, "-"); ok {
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			d.Buried = msTime(n)
		}
	}
	return d, nil
}

// Kick puts dead letters back on their shards' event streams as fresh
// events, delivered again from attempt 1, and removes them from the
// dead-letter streams, each in one step. It returns how many it found and
// kicked (a dead letter already kicked or deleted is not counted).
func (s *Set) Kick(ctx context.Context, letters ...DeadLetter) (int, error) {
	return s.eachDeadShard(ctx, letters, func(ctx context.Context, shard int, ids []string) (int64, error) {
		return s.st.Kick(ctx, shard, ids)
	})
}

// DeleteDeadLetters deletes dead letters for good and returns how many it
// found.
func (s *Set) DeleteDeadLetters(ctx context.Context, letters ...DeadLetter) (int, error) {
	return s.eachDeadShard(ctx, letters, func(ctx context.Context, shard int, ids []string) (int64, error) {
		return s.st.DeleteDeadLetters(ctx, shard, ids)
	})
}

// eachDeadShard groups letters by shard and calls fn with at most maxBatch
// IDs at a time, adding up what it returns.
func (s *Set) eachDeadShard(ctx context.Context, letters []DeadLetter, fn func(ctx context.Context, shard int, ids []string) (int64, error)) (int, error) {
	if err := s.opened(); err != nil {
		return 0, err
	}
	byShard := map[int][]string{}
	var order []int
	for _, d := range letters {
		if _, _, err := s.shardRange(d.Shard); err != nil || d.Shard == allShards {
			return 0, fmt.Errorf("%w: dead letter %s of shard %d", ErrInvalidArgument, d.ID, d.Shard)
		}
		if !validStreamID(d.ID) {
			return 0, fmt.Errorf("%w: dead letter ID %q of shard %d is not a stream ID (ms-seq)", ErrInvalidArgument, d.ID, d.Shard)
		}
		if _, seen := byShard[d.Shard]; !seen {
			order = append(order, d.Shard)
		}
		byShard[d.Shard] = append(byShard[d.Shard], d.ID)
	}
	total := 0
	for _, shard := range order {
		ids := byShard[shard]
		for len(ids) > 0 {
			batch := ids[:min(len(ids), maxBatch)]
			ids = ids[len(batch):]
			n, err := fn(ctx, shard, batch)
			total += int(n)
			if err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// validStreamID reports whether id is a complete Redis stream ID, "ms-seq"
// with both parts unsigned 64-bit decimals, so that a malformed one is
// rejected before any shard is touched.
func validStreamID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return err1 == nil && err2 == nil
}
