package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// schedule.go serves schedule.lua: Set.PutSchedule, RemoveSchedule,
// PauseSchedule, ResumeSchedule and the sweeper's refills; and reads the
// schedules' records it writes.

// scheduleCall builds schedule.lua's call of op on schedule id, with the
// op's arguments after the ID.
func (s *Store) scheduleCall(what, op, id string, args ...any) *Call {
	shard := ShardOf(id, len(s.shards))
	sk := &s.shards[shard]
	return &Call{Op: what, Shard: shard, Script: scriptSchedule, Keys: []string{sk.Owner + ScheduleOwner, sk.Sched, sk.Due},
		Args: append([]any{s.now(), op, id}, args...)}
}

// ScheduleKey returns the key of the records of schedule id.
func (s *Store) ScheduleKey(id string) string { return s.shards[ShardOf(id, len(s.shards))].Sched }

// ticksArgs appends ticks to args.
func ticksArgs(args []any, ticks []int64) []any {
	for _, t := range ticks {
		args = append(args, t)
	}
	return args
}

// readSchedule reads the {next, paused} reply of put and resume: the next
// tick (zero when none is listed yet or paused).
func readSchedule(v any) (next time.Time, paused bool, err error) {
	xs, ok := v.([]any)
	if !ok || len(xs) != 2 {
		return time.Time{}, false, Unexpected("schedule.lua", v)
	}
	n, ok1 := Int64(xs[0])
	p, ok2 := Int64(xs[1])
	if !ok1 || !ok2 {
		return time.Time{}, false, Unexpected("schedule.lua", v)
	}
	if n < 0 || p == 1 {
		return time.Time{}, p == 1, nil
	}
	return msTime(n), false, nil
}

// wroteAll makes a schedule.lua call wait for WithDurability's
// acknowledgements whatever it answered.
func wroteAll(any) bool { return true }

// PutSchedule runs schedule.lua's put: schedule id with its configuration
// conf, catch-up, payload (when hasPayload) and upcoming ticks. It returns
// the next tick and whether WithDurability's acknowledgements came.
func (s *Store) PutSchedule(ctx context.Context, id, conf string, catchUp int, payload []byte, hasPayload bool, ticks []int64) (next time.Time, durable bool, err error) {
	args := []any{catchUp, conf, "0", ""}
	if hasPayload {
		args[2], args[3] = "1", payload
	}
	c := s.scheduleCall("put schedule", "put", id, ticksArgs(args, ticks)...)
	s.runWrite(ctx, c, true, wroteAll)
	if c.Err != nil {
		return time.Time{}, false, c.Err
	}
	next, _, err = readSchedule(c.Reply)
	return next, c.Durable, err
}

// RemoveSchedule runs schedule.lua's remove and reports whether schedule id
// was there.
func (s *Store) RemoveSchedule(ctx context.Context, id string) (bool, error) {
	c := s.scheduleCall("remove schedule", "remove", id)
	s.runWrite(ctx, c, true, wroteAll)
	if c.Err != nil {
		return false, c.Err
	}
	n, ok := Int64(c.Reply)
	if !ok {
		return false, Unexpected("schedule.lua", c.Reply)
	}
	return n == 1, nil
}

// PauseSchedule runs schedule.lua's pause and reports whether schedule id
// was there.
func (s *Store) PauseSchedule(ctx context.Context, id string) (bool, error) {
	c := s.scheduleCall("pause schedule", "pause", id)
	s.runWrite(ctx, c, true, wroteAll)
	return c.Reply != nil, c.Err
}

// ResumeSchedule runs schedule.lua's resume of schedule id, of generation
// gen, with its upcoming ticks. found is false for an unknown id; again is
// true when the schedule was put again meanwhile (read it again).
func (s *Store) ResumeSchedule(ctx context.Context, id, gen string, ticks []int64) (next time.Time, found, again bool, err error) {
	c := s.scheduleCall("resume schedule", "resume", id, ticksArgs([]any{gen}, ticks)...)
	s.runWrite(ctx, c, true, wroteAll)
	if c.Err != nil {
		return time.Time{}, false, false, c.Err
	}
	if c.Reply == nil {
		return time.Time{}, false, false, nil
	}
	if xs, ok := c.Reply.([]any); ok && len(xs) == 2 && xs[0] == int64(-2) {
		return time.Time{}, true, true, nil
	}
	next, _, err = readSchedule(c.Reply)
	return next, true, false, err
}

// RefillSchedule runs schedule.lua's refill: ticks appended to schedule
// id's list after tail, for generation gen, in shard. Its reply carries
// nothing to read.
func (s *Store) RefillSchedule(ctx context.Context, id, gen string, tail int64, ticks []int64) error {
	c := s.scheduleCall("refill schedule", "refill", id, ticksArgs([]any{gen, tail}, ticks)...)
	s.runWrite(ctx, c, true, wroteAll)
	return c.Err
}

// ScheduleState reads schedule id's configuration and the generation of
// its tick state; found is false when it has none.
func (s *Store) ScheduleState(ctx context.Context, id string) (conf, gen string, found bool, err error) {
	key := s.ScheduleKey(id)
	vals, err := s.rdb.HMGet(ctx, key, "c:"+id, "t:"+id).Result()
	if err != nil {
		return "", "", false, fmt.Errorf("expset: resume schedule %s: %w", key, err)
	}
	conf, _ = vals[0].(string)
	state, _ := vals[1].(string)
	if conf == "" || state == "" {
		return "", "", false, nil
	}
	gen, _, _ = strings.Cut(state, " ")
	return conf, gen, true, nil
}

// ScheduleRecord is one schedule's record as schedule.lua keeps it: its
// configuration (Go's, kept as given), its payload, and from its tick state
// whether it is paused, its latest tick fired and its next tick (zero when
// none).
type ScheduleRecord struct {
	ID      string
	Conf    string
	Payload []byte // nil when it has none
	Paused  bool
	Last    time.Time
	Next    time.Time
}

// Schedules reads every shard's schedule records, in one round trip per
// server.
func (s *Store) Schedules(ctx context.Context) ([]ScheduleRecord, error) {
	cmds := make([]*redis.MapStringStringCmd, len(s.shards))
	pipe := s.rdb.Pipeline()
	for i := range s.shards {
		cmds[i] = pipe.HGetAll(ctx, s.shards[i].Sched)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("expset: schedules of %s: %w", s.name, err)
	}
	var out []ScheduleRecord
	for _, cmd := range cmds {
		m := cmd.Val()
		for f, conf := range m {
			id, ok := strings.CutPrefix(f, "c:")
			if !ok {
				continue
			}
			r := ScheduleRecord{ID: id, Conf: conf}
			if p, ok := m["p:"+id]; ok {
				r.Payload = []byte(p)
			}
			st := strings.Fields(m["t:"+id])
			if len(st) >= 5 {
				r.Paused = st[2] == "1"
				if fired, _ := strconv.ParseInt(st[3], 10, 64); fired > 0 {
					r.Last = msTime(fired)
				}
				if len(st) > 5 && !r.Paused {
					if next, err := strconv.ParseInt(st[5], 10, 64); err == nil {
						r.Next = msTime(next)
					}
				}
			}
			out = append(out, r)
		}
	}
	return out, nil
}
