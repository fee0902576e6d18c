package expset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/robfig/cron/v3"
)

// Recurring schedules have no scheduler process. A schedule is a member of
// its shard's schedule owner (scheduleOwner, a reserved owner like the job
// buckets) whose deadline is its next tick, so the due index lists it like
// any owner; its record (internal/store/lua/schedule.lua) holds its upcoming ticks. The
// sweep script that finds it due (internal/store/lua/sweep.lua, flag s) writes one event
// per tick and files it at its next listed tick, in one script: whichever
// sweeper runs it, in whatever process, each tick is taken off the list,
// and written as an event, once. Cron arithmetic runs in Go: Set.PutSchedule
// lists the first scheduleTicks ticks, and the sweeper that sees a list run
// short (under LOW in sweep.lua) computes the next ones from the spec and
// appends them (refillSchedules), guarded by the schedule's generation and
// the list's tail, so a refill racing a put or another refill changes
// nothing.
const (
	scheduleOwner = store.ScheduleOwner
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
	next, durable, err := s.st.PutSchedule(ctx, id, string(conf), c.catchUp, c.call.payload, c.call.hasPayload, ticks)
	if err != nil {
		return time.Time{}, hideJobOwner(err, "put schedule", scheduleName(id))
	}
	if dur := s.st.Durable(); dur.On() && !durable {
		return next, fmt.Errorf("%w: put schedule %s: %s", ErrNotDurable, s.st.ScheduleKey(id), dur.Shortfall())
	}
	return next, nil
}

// RemoveSchedule removes the schedule id and reports whether there was
// one: it fires no more (events already written stay). One round trip;
// safe for concurrent use.
func (s *Set) RemoveSchedule(ctx context.Context, id string) (bool, error) {
	if err := s.checkSchedule(id); err != nil {
		return false, err
	}
	ok, err := s.st.RemoveSchedule(ctx, id)
	return ok, hideJobOwner(err, "remove schedule", scheduleName(id))
}

// PauseSchedule pauses the schedule id: no tick fires until
// ResumeSchedule, and the ticks of the pause never do. An unknown id gets
// an error matching ErrNotFound. One round trip; safe for concurrent use.
func (s *Set) PauseSchedule(ctx context.Context, id string) error {
	if err := s.checkSchedule(id); err != nil {
		return err
	}
	found, err := s.st.PauseSchedule(ctx, id)
	if err == nil && !found {
		return fmt.Errorf("%w: schedule %q", ErrNotFound, id)
	}
	return hideJobOwner(err, "pause schedule", scheduleName(id))
}

// ResumeSchedule resumes the paused schedule id from its first tick after
// now, and returns that tick; a schedule not paused is left as it is. An
// unknown id gets an error matching ErrNotFound. Two round trips (a read
// of the spec, then the write); safe for concurrent use.
func (s *Set) ResumeSchedule(ctx context.Context, id string) (time.Time, error) {
	if err := s.checkSchedule(id); err != nil {
		return time.Time{}, err
	}
	for {
		conf, gen, found, err := s.st.ScheduleState(ctx, id)
		if err != nil {
			return time.Time{}, err
		}
		if !found {
			return time.Time{}, fmt.Errorf("%w: schedule %q", ErrNotFound, id)
		}
		var rec scheduleRecord
		sc, err := s.parseRecord(conf, &rec)
		if err != nil {
			return time.Time{}, err
		}
		now := s.clockNow()
		next, found, again, err := s.st.ResumeSchedule(ctx, id, gen, upcoming(sc, now, now, -1, scheduleTicks))
		if err != nil {
			return time.Time{}, hideJobOwner(err, "resume schedule", scheduleName(id))
		}
		if !found {
			return time.Time{}, fmt.Errorf("%w: schedule %q", ErrNotFound, id)
		}
		if !again {
			return next, nil
		}
		// put again meanwhile: read the new spec
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
	recs, err := s.st.Schedules(ctx)
	if err != nil {
		return nil, err
	}
	var out []Schedule
	for _, r := range recs {
		var rec scheduleRecord
		if err := json.Unmarshal([]byte(r.Conf), &rec); err != nil {
			return nil, fmt.Errorf("%w: schedule record %q: %v", errUnexpectedReply, r.Conf, err)
		}
		out = append(out, Schedule{ID: r.ID, Spec: rec.Spec, CatchUp: rec.CatchUp, Payload: r.Payload, Paused: r.Paused, Next: r.Next, Last: r.Last})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// refillSchedules appends the next ticks of each schedule a sweep of
// a shard found short of them, computed from its spec after the list's
// tail; of the ticks missed (more than grace before the sweep's now),
// only those WithCatchUp keeps are listed. A refill that finds the
// schedule put again, or refilled by another sweeper, changes nothing.
func (w *Sweeper) refillSchedules(ctx context.Context, now int64, rs []store.Refill) error {
	cutoff := msTime(now).Add(-w.grace())
	var errs []error
	for _, r := range rs {
		if r.Conf == "" {
			continue // removed meanwhile
		}
		var rec scheduleRecord
		sc, err := w.set.parseRecord(r.Conf, &rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ticks := upcoming(sc, msTime(r.Tail), cutoff, rec.CatchUp, scheduleTicks)
		if len(ticks) == 0 {
			continue // never fires again: stays parked
		}
		if err := w.set.st.RefillSchedule(ctx, r.ID, r.Gen, r.Tail, ticks); err != nil {
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
