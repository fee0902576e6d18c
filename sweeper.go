package expset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/expset/expset/internal/store"
)

// Sweeper defaults.
const (
	defaultLeaseTTL        = 10 * time.Second // WithLeaseTTL
	defaultMaxIdle         = 10 * time.Second // WithPollInterval: the safety poll
	defaultOwnersPerBatch  = 100              // WithOwnersPerBatch
	defaultMembersPerBatch = 1000             // WithMembersPerBatch
)

// sweepOnceParallel is how many shards SweepOnce sweeps at once: sweeping is mostly round trips per shard, so a backlog spread
// over many shards drains faster with several in flight.
const sweepOnceParallel = 4

// indexGrace is INDEX_GRACE of internal/store/lua/prelude.lua: on a set without events, how
// long a due index entry may stay overdue before writes remove it, and how
// long the index key outlives the latest deadline filed in it.
const indexGrace = time.Hour

// Sweeper reclaims expired members of a Set and, with WithExpiryEvents, turns
// each into exactly one event on its shard's stream, in the same script that
// removes it.
//
// A sweep visits only the owners the shard's due index lists as due, so its
// work follows what expired, not how many owners exist. Each script handles a
// bounded batch (WithOwnersPerBatch owners, WithMembersPerBatch members), and
// Go loops until nothing is due, so no script runs long however much expired.
//
// Any number of sweepers, in any number of processes, may sweep one set:
// each Run holds one lease in the set's sweeper registry, and the live
// leases deal the shards out among them, so they share the shards instead
// of racing over them. The scripts re-check every owner's state, so even
// two sweepers on one shard (while the others have not yet seen one join
// or leave) remove each member, and emit its event, once. Killing a
// sweeper loses nothing: the others take its shards when its lease ends.
//
// A Sweeper is safe for simultaneous use by multiple goroutines, but one Run
// per Sweeper is what it is built for. Create one with NewSweeper: a zero
// or nil *Sweeper's Run and SweepOnce fail with ErrInvalidArgument.
type Sweeper struct {
	set *Set
	cfg sweeperConfig

	mu    sync.Mutex
	runs  int       // Run calls under way
	since time.Time // when the first of them began (see grace)
}

type sweeperConfig struct {
	leaseTTL time.Duration
	maxIdle  time.Duration
	owners   int
	members  int
	retain   retention // WithEventRetention
}

// WithOwnersPerBatch sets how many due owners one sweep script takes
// (default 100; 1 to 1000, so 0 is an error).
func WithOwnersPerBatch(n int) SweeperOption {
	return sweeperOption(func(c *sweeperConfig) error {
		c.owners = n
		return inRange("WithOwnersPerBatch", n, 1, maxBatch)
	})
}

// WithMembersPerBatch sets the most expired members one sweep script removes
// (default 1000; 1 to 1000, so 0 is an error). With expiry events each
// one is an XADD, so this bounds how long a script holds Redis.
func WithMembersPerBatch(n int) SweeperOption {
	return sweeperOption(func(c *sweeperConfig) error {
		c.members = n
		return inRange("WithMembersPerBatch", n, 1, maxBatch)
	})
}

// NewSweeper returns a sweeper of s. It fails with ErrInvalidArgument for a
// nil s, an invalid option (the first one), a set that keeps no due index (opened without WithExpiryEvents or
// WithSweepIndex), or WithEventRetention on a set without expiry events.
// Options: WithLeaseTTL, WithPollInterval, WithOwnersPerBatch,
// WithMembersPerBatch, WithEventRetention. Hooks.OnSweep and Hooks.OnError (WithHooks on the
// set) report what Run sweeps and the errors it survives.
func NewSweeper(s *Set, opts ...SweeperOption) (*Sweeper, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: NewSweeper of a nil Set", ErrInvalidArgument)
	}
	if err := s.opened(); err != nil {
		return nil, err
	}
	cfg := sweeperConfig{
		leaseTTL: defaultLeaseTTL,
		maxIdle:  defaultMaxIdle,
		owners:   defaultOwnersPerBatch,
		members:  defaultMembersPerBatch,
		retain:   retention{maxAge: defaultEventMaxAge, maxLen: defaultEventMaxLen, maxBytes: defaultEventBytes},
	}
	if err := applyOptions(opts, &cfg, SweeperOption.applySweeper); err != nil {
		return nil, err
	}
	if cfg.retain.set && !s.events {
		return nil, fmt.Errorf("%w: WithEventRetention applies to a set WithExpiryEvents only: set %q has no events", ErrInvalidArgument, s.name)
	}
	if !s.index {
		return nil, fmt.Errorf("%w: set %q keeps no due index (open it WithExpiryEvents or WithSweepIndex to sweep it; without, owner keys expire by their key TTL and writes drop expired members)", ErrInvalidArgument, s.name)
	}
	return &Sweeper{set: s, cfg: cfg}, nil
}

// SweepStats counts what sweeping did. Sweeping 3 owners with 2 expired
// members each, 1 and 3 seconds late, in one batch of one shard, reports
// Owners=3, Expired=6, Batches=1, Shards=1, MaxLateness=3s, MeanLateness=2s.
// Jobs put due at once are not swept (Set.Put writes their events) and
// not counted.
type SweepStats struct {
	Owners       int           // owner visits that removed at least one expired member (jobs' and schedules' owners not counted)
	Expired      int           // expired members removed (with events on, events written)
	Stale        int           // index entries corrected without removing anything: early, or of a gone owner
	Trimmed      int           // events the retention removed unconsumed (WithEventRetention)
	Batches      int           // sweep scripts that were given owners
	Shards       int           // shards swept until nothing was left due
	Skipped      int           // shards SweepOnce left alone: a Sweeper.Run holds them
	MaxLateness  time.Duration // the largest now - deadline of the members removed
	MeanLateness time.Duration // the mean now - deadline of the members removed
	NotDurable   int           // with WithDurability: events written whose acknowledgements did not come in time

	lateSum int64 // ms, for merging
}

func (s *SweepStats) add(o SweepStats) {
	s.Owners += o.Owners
	s.Expired += o.Expired
	s.Stale += o.Stale
	s.Trimmed += o.Trimmed
	s.NotDurable += o.NotDurable
	s.Batches += o.Batches
	s.Shards += o.Shards
	s.Skipped += o.Skipped
	s.MaxLateness = max(s.MaxLateness, o.MaxLateness)
	s.lateSum += o.lateSum
	if s.Expired > 0 {
		s.MeanLateness = time.Duration(s.lateSum/int64(s.Expired)) * time.Millisecond
	}
}

// sweepReply is one sweep round's reply, its counts as SweepStats.
type sweepReply struct {
	now, earliest int64 // ms; earliest is -1 when the index is empty
	stats         SweepStats
	due           []string
	refills       []store.Refill // schedules short of ticks (schedules.go)
}

// sweepBatch runs one sweep.lua over owners of shard (possibly none: a
// read of what is due).
func (w *Sweeper) sweepBatch(ctx context.Context, shard int, owners []string) (sweepReply, error) {
	ret := w.cfg.retain
	sw, err := w.set.st.Sweep(ctx, store.SweepArgs{Shard: shard, Owners: owners, Members: w.cfg.members, PerRound: w.cfg.owners,
		MaxAge: ret.maxAge, MaxLen: ret.maxLen, MaxBytes: ret.maxBytes, Grace: w.grace})
	if err != nil {
		return sweepReply{}, err
	}
	r := sweepReply{now: sw.Now, earliest: sw.Earliest, due: sw.Due, refills: sw.Refills, stats: SweepStats{
		Expired: sw.Expired, lateSum: sw.LateSum, MaxLateness: sw.MaxLateness, Owners: sw.Owners, Stale: sw.Stale, Trimmed: sw.Trimmed}}
	if sw.NotDurable {
		r.stats.NotDurable = r.stats.Expired
	}
	if len(owners) > 0 { // the schedules' owner among them too
		r.stats.Batches = 1
	}
	if len(r.refills) > 0 {
		err = w.refillSchedules(ctx, r.now, r.refills)
		if !slices.Contains(r.due, scheduleOwner) {
			r.due = append(r.due, scheduleOwner) // look again: the refill may have made ticks due
		}
	}
	if h := w.set.hooks.OnSweep; h != nil && (len(owners) > 0 || r.stats.Trimmed > 0) {
		var st SweepStats
		st.add(r.stats) // computes MeanLateness
		h(ctx, CallInfo{Set: w.set.name, Op: "sweep", Shard: shard}, st)
	}
	return r, err
}

// sweepShard sweeps shard i until nothing is due, calling keep before every
// batch: an error from keep (a shard handed over) stops the sweep at once. The reply
// returned is the last one, whose earliest tells when the shard is next due.
func (w *Sweeper) sweepShard(ctx context.Context, i int, keep func(context.Context) error) (SweepStats, sweepReply, error) {
	var st SweepStats
	var owners []string
	for {
		if err := keep(ctx); err != nil {
			return st, sweepReply{}, err
		}
		r, err := w.sweepBatch(ctx, i, owners)
		st.add(r.stats) // a schedule's refill may fail after the sweep
		if err != nil {
			return st, r, err
		}
		owners = r.due
		if len(owners) == 0 {
			st.Shards = 1
			return st, r, nil
		}
	}
}

// errRefresh marks a lease renewal that failed on a Redis error: the lease
// may still be ours.
var errRefresh = errors.New("expset: lease refresh failed")

// errHandedOver stops the sweep of a shard the registry now gives another
// sweeper.
var errHandedOver = errors.New("expset: shard handed over")

func (w *Sweeper) check() error {
	if w == nil {
		return fmt.Errorf("%w: nil *Sweeper: create it with NewSweeper", ErrInvalidArgument)
	}
	if w.set == nil {
		return fmt.Errorf("%w: zero *Sweeper: create it with NewSweeper", ErrInvalidArgument)
	}
	return nil
}

// SweepOnce sweeps every shard until nothing is due, with up to 4 shards
// in flight, and returns what it did, unless a Sweeper.Run holds a lease on
// the set (in any process; the sweeper a Consume or Reserve runs is one):
// then it leaves every shard to the running sweepers and counts them in
// Skipped. A Redis error on one shard does not
// stop the others: every shard is tried, and the errors of the shards that
// failed come back joined (errors.Join, each naming its key), beside the
// stats of what was swept. It stops early only when ctx ends. It starts
// goroutines only for its own duration. Cost: one round trip to read the
// sweeper registry, then the sweep's.
func (w *Sweeper) SweepOnce(ctx context.Context) (SweepStats, error) {
	if err := w.check(); err != nil {
		return SweepStats{}, err
	}
	reg, err := w.set.sweepers(ctx, "", -1)
	if err != nil {
		return SweepStats{}, err
	}
	if len(reg.Tokens) > 0 {
		return SweepStats{Skipped: len(w.set.shards)}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		total SweepStats
		errs  = make([]error, len(w.set.shards)) // by shard, so the join is in shard order
		wg    sync.WaitGroup
		next  = make(chan int)
		sweep = func(context.Context) error { return nil }
	)
	for range min(sweepOnceParallel, len(w.set.shards)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				st, _, err := w.sweepShard(ctx, i, sweep)
				mu.Lock()
				total.add(st)
				errs[i] = err
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range w.set.shards {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	err = errors.Join(errs...)
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return total, err
}

// shardState is what Run knows of one shard.
type shardState struct {
	held  bool      // the sweeper's lease gives it this shard
	next  time.Time // when to sweep it (held)
	retry backoff   // the delay after consecutive failures
	skew  int64     // ms: the index's clock minus this process's, at the last sweep
	swept bool      // swept at least once
	grid  time.Time // the origin of its safety polls (nextPoll)
	due   time.Time // the next deadline the last sweep or a wake-up told (zero: none)
	full  time.Time // when the shard was last swept
	seen  time.Time // when the shard was last looked at: swept or peeked (looking)
}

// fullEvery is how many looks at a shard in a row may read its due index's
// head alone (one ZRANGE) before one sweeps it in full, which also trims
// its stream to the retention.
const fullEvery = 6

// peek is the safety poll of a held shard swept not long ago, with no
// deadline due (up: the shard's subscription is up). It reports whether
// that sets the shard's next sweep, or a sweep is needed now: the poll
// passes by without a command when looking says so, else it reads the
// head of the shard's due index (one command, no script).
func (w *Sweeper) peek(ctx context.Context, i int, sh *shardState, now time.Time, up bool) bool {
	safety := safetyEvery(w.cfg.maxIdle, len(w.set.shards))
	if !sh.held || sh.retry.failing() || !sh.swept || (!sh.due.IsZero() && !sh.due.After(now)) {
		return false
	}
	if !looking(now, sh.seen, safety, up) {
		sh.next = nextPoll(sh.grid, now, safety)
		if !sh.due.IsZero() {
			sh.next = minTime(sh.next, sh.due)
		}
		return true
	}
	looks := safety
	if up {
		looks *= healthyStretch
	}
	if now.Sub(sh.full) >= fullEvery*looks {
		return false
	}
	head, ok, err := w.set.st.DueHead(ctx, i)
	if err != nil {
		return false // the sweep reports what fails
	}
	sh.next, sh.seen = nextPoll(sh.grid, now, safety), now
	if ok {
		at := time.UnixMilli(head - sh.skew)
		if !at.After(now) {
			return false
		}
		sh.due = at
		sh.next = minTime(sh.next, at)
	}
	return true
}

// Run sweeps until ctx ends, then gives up its lease and returns nil. It
// holds one lease (WithLeaseTTL) in the set's sweeper registry, renewed
// about every third of its TTL (one script call whatever the shard count),
// and sweeps the shards the live leases deal it: all of them when it runs
// alone, its share when others run. Each shard it sweeps when the earliest
// deadline in its due index comes, and sleeps until then: a write that
// brings a shard's earliest deadline closer wakes it (pub/sub, one
// subscription per shard, one for all on a single server), and a safety
// poll (WithPollInterval; every second one while the shard's subscription
// is up) looks at each shard in case a wake-up was lost. It reads the registry again when another sweeper's lease would
// end, so the shards of a sweeper that died are taken over as its lease
// ends, and those of one that stopped at once.
//
// Errors do not end Run, and none is silent. A Redis error (connection
// refused, a timeout, LOADING during a restart, a failover, a key of the
// wrong type in one shard) is confined to the shard it happened on: it is
// reported and that shard is tried again after a backoff that starts at
// 100ms and doubles with each consecutive failure up to 5s (with jitter),
// while the other shards are swept as usual; the shard resumes as soon as a
// try succeeds. While the lease cannot be renewed, Run sweeps the shards it
// held (sweeping a shard twice is only work done twice); a lease that ended
// meanwhile is taken anew with the same token (op "lease", ErrLeaseLost).
// Each error goes
// to Hooks.OnError; when it is not set, to
// log/slog's default logger at warning level, rate-limited (see
// Hooks.OnError). Run returns an error only for invalid options or a set
// that keeps no due index.
func (w *Sweeper) Run(ctx context.Context) error {
	if err := w.check(); err != nil {
		return err
	}
	w.mu.Lock()
	if w.runs == 0 {
		w.since = time.Now()
	}
	w.runs++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.runs--
		w.mu.Unlock()
	}()
	shards := make([]shardState, len(w.set.shards))
	start, safety := time.Now(), safetyEvery(w.cfg.maxIdle, len(shards))
	for i := range shards {
		shards[i].grid = pollOrigin(start, safety, i, len(shards))
	}
	l := newSweeperLease(w.cfg.leaseTTL)
	wk := w.set.listen("subscribe", func(k *store.Keys) string { return k.DueWake })
	defer wk.close()
	defer w.leave(ctx, l)
	return w.set.loop(ctx, "sweep", wk.signal, func() (time.Duration, error) {
		w.woken(shards, wk.take())
		return max(time.Until(w.round(ctx, l, shards, wk)), time.Millisecond), nil
	})
}

// woken brings the next sweep of each held shard notified forward to the
// deadline it was told (at once when none was, or after a
// re-subscription). A shard another sweeper holds is its business.
func (w *Sweeper) woken(shards []shardState, woken map[int]int64) {
	now := time.Now()
	for i, d := range woken {
		sh := &shards[i]
		if !sh.held || sh.retry.failing() {
			continue
		}
		at := now
		if d >= 0 {
			// The deadline is on the index's clock: wait for the distance.
			at = time.UnixMilli(d - sh.skew)
		}
		if at.Before(sh.next) {
			sh.next = at
		}
		if sh.due.IsZero() || at.Before(sh.due) {
			sh.due = at
		}
	}
}

// round renews the lease if it is time, does what is due for each shard
// it holds, and returns when the next thing is. wk's subscriptions say
// which shards' wake-ups come (looking).
func (w *Sweeper) round(ctx context.Context, l *sweeperLease, shards []shardState, wk *wakeups) time.Time {
	w.keepLease(ctx, l, shards)
	now := time.Now()
	for i := range shards {
		if ctx.Err() != nil {
			break
		}
		if shards[i].held && !shards[i].next.After(now) && !w.peek(ctx, i, &shards[i], now, wk.up(i)) {
			w.visit(ctx, i, l, shards)
		}
	}
	wake := now.Add(safetyEvery(w.cfg.maxIdle, len(shards)))
	for i := range shards {
		if sh := &shards[i]; sh.held && sh.next.Before(wake) {
			wake = sh.next
		}
	}
	return minTime(wake, l.next)
}

// keepLease renews l when it is due, reporting what fails, and sets which
// shards are held: a shard gained is swept at once, a shard lost left at
// once (the sweep of it in progress stops before its next batch).
func (w *Sweeper) keepLease(ctx context.Context, l *sweeperLease, shards []shardState) {
	if !l.due(time.Now()) {
		return
	}
	if err := w.renew(ctx, l); err != nil {
		w.report(ctx, "lease", -1, err, time.Until(l.next))
	}
	now := time.Now()
	for i := range shards {
		sh, held := &shards[i], l.holds(i)
		if held && !sh.held {
			sh.next, sh.swept, sh.due = now, false, time.Time{}
			sh.retry.ok()
		}
		sh.held = held
	}
}

// visit sweeps shard i and sets when to visit it next. While it sweeps, the
// lease is renewed when due: a long sweep must not let it lapse.
func (w *Sweeper) visit(ctx context.Context, i int, l *sweeperLease, shards []shardState) {
	sh := &shards[i]
	_, r, err := w.sweepShard(ctx, i, func(ctx context.Context) error {
		w.keepLease(ctx, l, shards)
		if !sh.held {
			return errHandedOver
		}
		return nil
	})
	switch {
	case errors.Is(err, errHandedOver):
		return
	case err != nil:
		w.failed(ctx, i, sh, "sweep", err)
		return
	}
	sh.retry.ok()
	// Until the next deadline, or a wake-up that brings one earlier; the
	// safety poll covers a wake-up lost.
	now := time.Now()
	sh.skew = r.now - now.UnixMilli()
	sh.swept = true
	retry := nextPoll(sh.grid, now, safetyEvery(w.cfg.maxIdle, len(shards)))
	sh.next = retry
	sh.full, sh.seen = now, now
	sh.due = time.Time{}
	if r.earliest >= 0 {
		// The index's clock (server TIME or WithClock) may differ from this
		// process's: wait for the distance between the two, not a wall time.
		at := now.Add(time.Duration(r.earliest-r.now) * time.Millisecond)
		sh.due = at
		if at.Before(retry) {
			sh.next = at
		}
	}
}

// failed reports err, which shard i's op failed with, and backs the shard
// off.
func (w *Sweeper) failed(ctx context.Context, i int, sh *shardState, op string, err error) {
	wait := sh.retry.fail()
	sh.next = time.Now().Add(wait)
	w.report(ctx, op, i, err, wait)
}

// report sends an error Run survived to Hooks.OnError, or, when it is not
// set, to the set's default log.
func (w *Sweeper) report(ctx context.Context, op string, shard int, err error, retry time.Duration) {
	if ctx.Err() != nil {
		return
	}
	w.set.reportError(ctx, op, shard, err, retry)
}
