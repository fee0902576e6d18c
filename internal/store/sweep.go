package store

import (
	"context"
	"strconv"
	"time"
)

// sweep.go serves sweep.lua: one bounded sweep round of one shard (the
// Sweeper).

// SweepArgs is one sweep round's arguments.
type SweepArgs struct {
	Shard    int
	Owners   []string // the owners the previous round listed due (none: a read of what is due)
	Members  int      // the most members the round removes (WithMembersPerBatch)
	PerRound int      // the most due owners the reply lists (WithOwnersPerBatch)
	MaxAge   time.Duration
	MaxLen   int64
	MaxBytes int64
	// Grace is how late a schedule's tick may be swept and still count
	// as swept in time, asked only when the schedules' owner is among
	// Owners.
	Grace func() time.Duration
}

// Refill is one schedule a sweep round found short of ticks: its ID, its
// generation, the tail its next ticks follow (ms) and its configuration
// ("" when removed meanwhile).
type Refill struct {
	ID   string
	Gen  string
	Tail int64
	Conf string
}

// Swept is sweep.lua's reply.
type Swept struct {
	Now, Earliest int64 // ms; Earliest is -1 when the index is empty
	Expired       int   // members removed (with events, events written)
	LateSum       int64 // ms: the sum of now - deadline of the members removed
	MaxLateness   time.Duration
	Owners        int // owner visits that removed a member, the job owners left out
	Stale         int // index entries corrected without removing anything
	Trimmed       int // events the retention removed unconsumed
	Due           []string
	Refills       []Refill
	NotDurable    bool // WithDurability's acknowledgements of the events written did not come
}

// sweepCall builds sweep.lua's call for a. The schedules' owner goes last,
// with the keys of flag s; payload keys are declared only for a set with
// payloads: the server builds a string for every key it is given.
func (s *Store) sweepCall(a SweepArgs) *Call {
	owners := a.Owners
	sched := false
	for i, o := range owners {
		if o == ScheduleOwner {
			owners = append(owners[:i:i], owners[i+1:]...)
			sched = true
			break
		}
	}
	sk := &s.shards[a.Shard]
	nk := 3 + len(owners)
	if s.payloads {
		nk += len(owners)
	}
	keys := make([]string, 3, nk)
	keys[0], keys[1], keys[2] = sk.Due, sk.Events, sk.Trimmed
	args := make([]any, 7, 8)
	args[0], args[1], args[2], args[3], args[4], args[5], args[6] = s.now(), s.flags, a.Members, a.PerRound, a.MaxAge.Milliseconds(), a.MaxLen, a.MaxBytes
	for _, o := range owners {
		keys = append(keys, sk.Owner+o)
	}
	if s.payloads {
		for _, o := range owners {
			keys = append(keys, sk.Payload+o)
		}
	}
	if sched {
		keys = append(keys, sk.Owner+ScheduleOwner, sk.Sched)
		args[1] = s.flags + "s"
		args = append(args, a.Grace().Milliseconds())
	}
	return &Call{Op: "sweep", Shard: a.Shard, Script: scriptSweep, Keys: keys, Args: args}
}

// readSweep reads sweep.lua's reply: {now, expired, late sum, max late,
// owners, stale, earliest, trimmed, due owners..., {refills}}.
func readSweep(v any) (Swept, error) {
	xs, ok := v.([]any)
	if !ok || len(xs) < 8 {
		return Swept{}, Unexpected("sweep.lua", v)
	}
	var n [8]int64
	for i := range n {
		if n[i], ok = Int64(xs[i]); !ok {
			return Swept{}, Unexpected("sweep.lua", v)
		}
	}
	r := Swept{Now: n[0], Earliest: n[6], Expired: int(n[1]), LateSum: n[2],
		MaxLateness: time.Duration(n[3]) * time.Millisecond, Owners: int(n[4]), Stale: int(n[5]), Trimmed: int(n[7])}
	for _, e := range xs[8:] {
		if rs, ok := e.([]any); ok {
			var err error
			if r.Refills, err = readRefills(v, rs); err != nil {
				return Swept{}, err
			}
			continue
		}
		o, ok := String(e)
		if !ok {
			return Swept{}, Unexpected("sweep.lua", v)
		}
		r.Due = append(r.Due, o)
	}
	return r, nil
}

// readRefills reads the refill list xs of a sweep reply v: ID, generation,
// tail, configuration, per schedule.
func readRefills(v any, xs []any) ([]Refill, error) {
	if len(xs)%4 != 0 {
		return nil, Unexpected("sweep.lua", v)
	}
	var out []Refill
	for i := 0; i < len(xs); i += 4 {
		id, ok1 := String(xs[i])
		gen, ok2 := Int64(xs[i+1])
		tail, ok3 := Int64(xs[i+2])
		conf, ok4 := String(xs[i+3])
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, Unexpected("sweep.lua", v)
		}
		out = append(out, Refill{ID: id, Gen: strconv.FormatInt(gen, 10), Tail: tail, Conf: conf})
	}
	return out, nil
}

// Sweep runs sweep.lua for a. With WithDurability, a round that wrote
// events waits for them, and NotDurable reports the acknowledgements that
// did not come.
func (s *Store) Sweep(ctx context.Context, a SweepArgs) (Swept, error) {
	wroteEvents := func(v any) bool {
		r, err := readSweep(v)
		return s.events && err == nil && r.Expired > 0
	}
	c := s.sweepCall(a)
	s.runWrite(ctx, c, false, wroteEvents)
	if c.Err != nil {
		return Swept{}, c.Err
	}
	r, err := readSweep(c.Reply)
	if err != nil {
		return r, err
	}
	r.NotDurable = s.durable.On() && wroteEvents(c.Reply) && !c.Durable
	return r, nil
}
