package expset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// Recurring schedules have no scheduler process. A schedule is a member of
// its shard's schedule owner (scheduleOwner, a reserved owner like the job
// buckets) whose deadline is its next tick, so the due index lists it like
// any owner; its record (lua/schedule.lua) holds its upcoming ticks. The
// sweep script that finds it due (lua/sweep.lua, flag s) writes one event
// per tick and files it at its next listed tick, in one script: whichever
// sweeper runs it, in whatever process, each tick is taken off the list,
// and written as an event, once. Cron arithmetic runs in Go: Set.PutSchedule
// lists the first scheduleTicks ticks, and the sweeper that sees a list run
// short (under LOW in sweep.lua) computes the next ones from the spec and
// appends them (refillSchedules), guarded by the schedule's generation and
// the list's tail, so a refill racing a put or another refill changes
// nothing.
const (
	scheduleOwner = jobOwnerPrefix + "sched"
	scheduleTicks = 32      // ticks listed by a put, resume or refill
	maxSpecLen    = 256     // bytes in a spec
	maxCatchUp    = 1000    // WithCatchUp's largest n
	maxScanTicks  = 1 << 20 // Next calls one refill makes at most, skipping missed ticks
)

// Schedule is a recurring schedule as Set.Schedules lists it.
type Schedule struct {
	ID      string
	Spec    string // as given to Set.PutSchedule
	CatchUp int    // WithCatchUp's n: -1 all, else the most missed ticks that fire
	Payload []byte // nil when it has none
	Paused  bool
	Next    time.Time // the next tick; zero when paused, or while the sweeper computes more ticks
	Last    time.Time // the latest tick written as an event; zero before the first
}

// ScheduleOption configures one Set.PutSchedule: WithCatchUp, WithPayload.
type ScheduleOption interface{ applySchedule(*scheduleCall) error }

type scheduleCall struct {
	call    callConfig // WithPayload
	catchUp int
}

type scheduleOption func(*scheduleCall) error

func (f scheduleOption) applySchedule(c *scheduleCall) error { return f(c) }
func (f writeOption) applySchedule(c *scheduleCall) error    { return f(&c.call) }

// WithCatchUp sets which of a schedule's ticks fire that were missed while
// nothing swept the set (every Sweeper stopped): the latest n of them, or
// all with n = -1; default 1 (one catch-up tick), 0 none; -1 to 1000. A
// tick counts as missed when the sweep that reaches it comes more than
// twice the sweeper's lease TTL (WithLeaseTTL) after it, and before the
// Sweeper.Run that sweeps it began: a running sweeper takes a dead one's
// shards within about a lease TTL, and one that ran all along (through a
// failover or a restart of Redis, say) missed nothing. Ticks in time
// always fire.
func WithCatchUp(n int) ScheduleOption {
	return scheduleOption(func(c *scheduleCall) error {
		c.catchUp = n
		return inRange("WithCatchUp", n, -1, maxCatchUp)
	})
}

// scheduleRecord is the configuration field of a record, c:<ID>.
type scheduleRecord struct {
	Spec    string `json:"s"`
	CatchUp int    `json:"c"`
}

// parseSpec parses spec with the cron parser's standard syntax: five
// fields (minute hour day-of-month month day-of-week) or a descriptor
// (@every 90s, @hourly, @daily, ...), optionally after CRON_TZ=<zone> (or
// TZ=<zone>); without a zone, UTC, so every process computes the same ticks
// whatever its local zone.
func parseSpec(spec string) (cron.Schedule, error) {
	if spec == "" || len(spec) > maxSpecLen {
		return nil, fmt.Errorf("%w: schedule spec of %d bytes (want 1 to %d)", ErrInvalidArgument, len(spec), maxSpecLen)
	}
	s := strings.TrimSpace(spec)
	if !strings.HasPrefix(s, "CRON_TZ=") && !strings.HasPrefix(s, "TZ=") {
		s = "CRON_TZ=UTC " + s
	}
	sc, err := cron.ParseStandard(s)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule spec %q: %v: use 5 fields (minute hour day-of-month month day-of-week), or @every <duration> (1s or more), @hourly, @daily, @weekly, @monthly or @yearly, optionally after CRON_TZ=<IANA zone>", ErrInvalidArgument, spec, err)
	}
	return sc, nil
}

// upcoming returns up to n ticks of sc after after, in Unix ms, ascending.
// With catchUp >= 0, ticks before cutoff (missed while nothing swept) are
// skipped but for the latest catchUp of them, which come first.
func upcoming(sc cron.Schedule, after, cutoff time.Time, catchUp, n int) []int64 {
	t := after
	if cd, ok := sc.(cron.ConstantDelaySchedule); ok && catchUp >= 0 && cd.Delay > 0 {
		// Jump over the missed ticks that will be skipped anyway.
		if k := cutoff.Sub(t)/cd.Delay - time.Duration(catchUp) - 1; k > 0 {
			t = t.Add(k * cd.Delay)
		}
	}
	var missed, out []int64
	for i := 0; len(out) < n && i < maxScanTicks; i++ {
		t = sc.Next(t)
		if t.IsZero() {
			break // the parser found no later tick (a date that never comes)
		}
		if catchUp >= 0 && t.Before(cutoff) {
			if catchUp > 0 {
				missed = append(missed, t.UnixMilli())
				if len(missed) > catchUp {
					missed = missed[1:]
				}
			}
			continue
		}
		out = append(out, t.UnixMilli())
	}
	return append(missed, out...)
}

// clockNow is the set's clock (WithClock), else this machine's.
func (s *Set) clockNow() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

// checkSchedule checks a call on the schedule id.
func (s *Set) checkSchedule(id string) error {
	if err := s.opened(); err != nil {
		return err
	}
	if !s.events {
		return fmt.Errorf("%w: set %q was opened without WithExpiryEvents: a schedule's ticks are delivered as expiry events, open it with it", ErrInvalidArgument, s.name)
	}
	if id == "" || len(id) > maxMemberLen {
		return fmt.Errorf("%w: schedule ID of %d bytes (want 1 to %d)", ErrInvalidArgument, len(id), maxMemberLen)
	}
	return nil
}

// scheduleKeys returns the shard of schedule id and the keys of
// lua/schedule.lua.
func (s *Set) scheduleKeys(id string) (int, []string) {
	shard := shardOf(id, len(s.shards))
	sk := &s.shards[shard]
	return shard, []string{sk.owner + scheduleOwner, sk.sched, sk.due}
}

// PutSchedule creates the recurring schedule id, or replaces its spec,
// catch-up and payload, and returns its next tick (zero when it is
// paused: a replaced schedule keeps its paused state). Each tick becomes
// one expiry event, written by whichever Sweeper sweeps the schedule's
// shard, and delivered to every consumer group like any expiry: Owner "",
// Member id, Deadline the tick's time, Tick true, the payload, attempt 1,
// with the usual retries and dead letters. No process is the scheduler:
// one sweeper or twenty write each tick once, and a sweeper killed
// loses none (see WithCatchUp for the ticks missed while none ran).
//
// spec is five cron fields (minute hour day-of-month month day-of-week:
// "30 2 * * 1-5") or a descriptor ("@every 90s", at least a second, whole
// seconds; "@hourly", "@daily", ...), as github.com/robfig/cron/v3 parses
// them, optionally after "CRON_TZ=<IANA zone> " (daylight-saving changes
// follow the parser: a time that does not exist that day is skipped, one
// that comes twice fires once); without a zone, UTC. A new or changed spec
// fires from its first tick after now, on the set's clock. Options:
// WithCatchUp, WithPayload (at most 1 MiB; the set needs no
// WithPayloadStorage). Without WithPayload the schedule has no payload.
// The set needs WithExpiryEvents. A bad ID, spec or option gets an error
// matching ErrInvalidArgument, and nothing is written.
//
// PutSchedule is one round trip; it is safe for concurrent use, the last
// call of one ID winning. It waits for WithDurability's acknowledgements
// as Add does.
func (s *Set) PutSchedule(ctx context.Context, id, spec string, opts ...ScheduleOption) (time.Time, error) {
	if err := s.checkSchedule(id); err != nil {
		return time.Time{}, err
	}
	sc, err := parseSpec(spec)
	if err != nil {
		return time.Time{}, err
	}
	c := scheduleCall{catchUp: 1}
	if err := applyOptions(opts, &c, ScheduleOption.applySchedule); err != nil {
		return time.Time{}, err
	}
	if len(c.call.payload) > maxPayloadLen {
		return time.Time{}, fmt.Errorf("%w: WithPayload: payload of %d bytes (at most %d)", ErrInvalidArgument, len(c.call.payload), maxPayloadLen)
	}
	now := s.clockNow()
	ticks := upcoming(sc, now, now, -1, scheduleTicks)
	if len(ticks) == 0 {
		return time.Time{}, fmt.Errorf("%w: schedule spec %q never fires after %s: use a date that comes", ErrInvalidArgument, spec, now.UTC().Format(time.RFC3339))
	}
	conf, err := json.Marshal(scheduleRecord{Spec: spec, CatchUp: c.catchUp})
	if err != nil {
		return time.Time{}, err
	}
	shard, keys := s.scheduleKeys(id)
	args := []any{s.now(), "put", id, c.catchUp, string(conf), "0", ""}
	if c.call.hasPayload {
		args[5], args[6] = "1", c.call.payload
	}
	for _, t := range ticks {
		args = append(args, t)
	}
	v, durable, err := s.runWrite(ctx, "put schedule", shard, scriptSchedule, keys, args, true, func(any) bool { return true })
	if err != nil {
		return time.Time{}, hideJobOwner(err, "put schedule", "schedule "+strconv.Quote(id))
	}
	next, _, err := parseScheduleReply(v)
	if err != nil {
		return time.Time{}, err
	}
	if s.durable.on() && !durable {
		return next, fmt.Errorf("%w: put schedule %s: %s", ErrNotDurable, keys[1], s.durable.shortfall())
	}
	return next, nil
}

// parseScheduleReply reads the {next, paused} reply of put and resume.
func parseScheduleReply(v any) (time.Time, bool, error) {
	xs, ok := v.([]any)
	if !ok || len(xs) != 2 {
		return time.Time{}, false, unexpected("schedule.lua", v)
	}
	next, ok1 := asInt64(xs[0])
	paused, ok2 := asInt64(xs[1])
	if !ok1 || !ok2 {
		return time.Time{}, false, unexpected("schedule.lua", v)
	}
	if next < 0 || paused == 1 {
		return time.Time{}, paused == 1, nil
	}
	return msTime(next), false, nil
}

// RemoveSchedule removes the schedule id and reports whether there was
// one: it fires no more (events already written stay). One round trip;
// safe for concurrent use.
func (s *Set) RemoveSchedule(ctx context.Context, id string) (bool, error) {
	if err := s.checkSchedule(id); err != nil {
		return false, err
	}
	shard, keys := s.scheduleKeys(id)
	v, _, err := s.runWrite(ctx, "remove schedule", shard, scriptSchedule, keys, []any{s.now(), "remove", id}, true, func(any) bool { return true })
	if err != nil {
		return false, hideJobOwner(err, "remove schedule", "schedule "+strconv.Quote(id))
	}
	n, ok := asInt64(v)
	if !ok {
		return false, unexpected("schedule.lua", v)
	}
	return n == 1, nil
}

// PauseSchedule pauses the schedule id: no tick fires until
// ResumeSchedule, and the ticks of the pause never do. An unknown id gets
// an error matching ErrNotFound. One round trip; safe for concurrent use.
func (s *Set) PauseSchedule(ctx context.Context, id string) error {
	if err := s.checkSchedule(id); err != nil {
		return err
	}
	shard, keys := s.scheduleKeys(id)
	v, _, err := s.runWrite(ctx, "pause schedule", shard, scriptSchedule, keys, []any{s.now(), "pause", id}, true, func(any) bool { return true })
	if err != nil {
		return hideJobOwner(err, "pause schedule", "schedule "+strconv.Quote(id))
	}
	if v == nil {
		return fmt.Errorf("%w: schedule %q", ErrNotFound, id)
	}
	return nil
}

// ResumeSchedule resumes the paused schedule id from its first tick after
// now, and returns that tick; a schedule not paused is left as it is. An
// unknown id gets an error matching ErrNotFound. Two round trips (a read
// of the spec, then the write); safe for concurrent use.
func (s *Set) ResumeSchedule(ctx context.Context, id string) (time.Time, error) {
	if err := s.checkSchedule(id); err != nil {
		return time.Time{}, err
	}
	shard, keys := s.scheduleKeys(id)
	for {
		vals, err := s.rdb.HMGet(ctx, keys[1], "c:"+id, "t:"+id).Result()
		if err != nil {
			return time.Time{}, fmt.Errorf("expset: resume schedule %s: %w", keys[1], err)
		}
		conf, _ := vals[0].(string)
		state, _ := vals[1].(string)
		if conf == "" || state == "" {
			return time.Time{}, fmt.Errorf("%w: schedule %q", ErrNotFound, id)
		}
		var rec scheduleRecord
		sc, err := s.parseRecord(conf, &rec)
		if err != nil {
			return time.Time{}, err
		}
		gen, _, _ := strings.Cut(state, " ")
		now := s.clockNow()
		args := []any{s.now(), "resume", id, gen}
		for _, t := range upcoming(sc, now, now, -1, scheduleTicks) {
			args = append(args, t)
		}
		v, _, err := s.runWrite(ctx, "resume schedule", shard, scriptSchedule, keys, args, true, func(any) bool { return true })
		if err != nil {
			return time.Time{}, hideJobOwner(err, "resume schedule", "schedule "+strconv.Quote(id))
		}
		if v == nil {
			return time.Time{}, fmt.Errorf("%w: schedule %q", ErrNotFound, id)
		}
		if xs, ok := v.([]any); ok && len(xs) == 2 && xs[0] == int64(-2) {
			continue // put again meanwhile: read the new spec
		}
		next, _, err := parseScheduleReply(v)
		return next, err
	}
}

// parseRecord reads a configuration field into rec and parses its spec.
func (s *Set) parseRecord(conf string, rec *scheduleRecord) (cron.Schedule, error) {
	if err := json.Unmarshal([]byte(conf), rec); err != nil {
		return nil, fmt.Errorf("%w: schedule record %q: %v", errUnexpectedReply, conf, err)
	}
	sc, err := parseSpec(rec.Spec)
	if err != nil {
		return nil, fmt.Errorf("%w: stored schedule spec %q: %v", errUnexpectedReply, rec.Spec, err)
	}
	return sc, nil
}

// Schedules lists the set's schedules, by ID, with their next and latest
// ticks. It reads every shard's records, in one round trip per server;
// its cost grows with the number of schedules. Safe for concurrent use; a
// schedule put or removed meanwhile may or may not be listed.
func (s *Set) Schedules(ctx context.Context) ([]Schedule, error) {
	if err := s.opened(); err != nil {
		return nil, err
	}
	cmds := make([]*redis.MapStringStringCmd, len(s.shards))
	pipe := s.rdb.Pipeline()
	for i := range s.shards {
		cmds[i] = pipe.HGetAll(ctx, s.shards[i].sched)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("expset: schedules of %s: %w", s.name, err)
	}
	var out []Schedule
	for _, cmd := range cmds {
		m := cmd.Val()
		for f, conf := range m {
			id, ok := strings.CutPrefix(f, "c:")
			if !ok {
				continue
			}
			var rec scheduleRecord
			if err := json.Unmarshal([]byte(conf), &rec); err != nil {
				return nil, fmt.Errorf("%w: schedule record %q: %v", errUnexpectedReply, conf, err)
			}
			sch := Schedule{ID: id, Spec: rec.Spec, CatchUp: rec.CatchUp}
			if p, ok := m["p:"+id]; ok {
				sch.Payload = []byte(p)
			}
			st := strings.Fields(m["t:"+id])
			if len(st) >= 5 {
				sch.Paused = st[2] == "1"
				if fired, _ := strconv.ParseInt(st[3], 10, 64); fired > 0 {
					sch.Last = msTime(fired)
				}
				if len(st) > 5 && !sch.Paused {
					if next, err := strconv.ParseInt(st[5], 10, 64); err == nil {
						sch.Next = msTime(next)
					}
				}
			}
			out = append(out, sch)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// scheduleRefill is one schedule a sweep found short of ticks.
type scheduleRefill struct {
	id   string
	gen  string
	tail int64  // ms: the ticks to append follow it
	conf string // its configuration field, "" when removed meanwhile
}

// parseRefills reads the refill list of a sweep reply: ID, generation,
// tail, configuration, per schedule.
func parseRefills(v any, xs []any) ([]scheduleRefill, error) {
	if len(xs)%4 != 0 {
		return nil, unexpected("sweep.lua", v)
	}
	var out []scheduleRefill
	for i := 0; i < len(xs); i += 4 {
		id, ok1 := asString(xs[i])
		gen, ok2 := asInt64(xs[i+1])
		tail, ok3 := asInt64(xs[i+2])
		conf, ok4 := asString(xs[i+3])
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, unexpected("sweep.lua", v)
		}
		out = append(out, scheduleRefill{id: id, gen: strconv.FormatInt(gen, 10), tail: tail, conf: conf})
	}
	return out, nil
}

// refillSchedules appends the next ticks of each schedule a sweep of
// shard found short of them, computed from its spec after the list's
// tail; of the ticks missed (more than grace before the sweep's now),
// only those WithCatchUp keeps are listed. A refill that finds the
// schedule put again, or refilled by another sweeper, changes nothing.
func (w *Sweeper) refillSchedules(ctx context.Context, shard int, now int64, rs []scheduleRefill) error {
	sk := &w.set.shards[shard]
	keys := []string{sk.owner + scheduleOwner, sk.sched, sk.due}
	cutoff := msTime(now).Add(-w.grace())
	var errs []error
	for _, r := range rs {
		if r.conf == "" {
			continue // removed meanwhile
		}
		var rec scheduleRecord
		sc, err := w.set.parseRecord(r.conf, &rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ticks := upcoming(sc, msTime(r.tail), cutoff, rec.CatchUp, scheduleTicks)
		if len(ticks) == 0 {
			continue // never fires again: stays parked
		}
		args := []any{w.set.now(), "refill", r.id, r.gen, r.tail}
		for _, t := range ticks {
			args = append(args, t)
		}
		if _, _, err := w.set.runWrite(ctx, "refill schedule", shard, scriptSchedule, keys, args, true, func(any) bool { return true }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// grace is how late a tick may be swept and still count as swept in time
// (WithCatchUp): twice the lease TTL, or longer while a Run goes on: every
// tick since the Run began came while something ran (a failover or a
// restart of Redis kept it from sweeping, say).
func (w *Sweeper) grace() time.Duration {
	g := 2 * w.cfg.leaseTTL
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runs > 0 {
		g = max(g, time.Since(w.since)+time.Second)
	}
	return g
}
