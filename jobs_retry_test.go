package expset

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// jobRunsTwice is a go-redis hook that sends every call of the job
// scripts that write (put, cancel_waiting, cancel) twice and
// keeps the second reply, as a client does that retries a call whose
// reply it lost while the server ran it. between, when set, runs between
// the two.
type jobRunsTwice struct {
	n       atomic.Int64
	between atomic.Pointer[func()]
}

func (h *jobRunsTwice) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *jobRunsTwice) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isJobWrite(cmd) {
			h.n.Add(1)
			first := redis.NewCmd(ctx, cmd.Args()...)
			_ = next(ctx, first) // its reply is lost
			if f := h.between.Load(); f != nil {
				(*f)()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *jobRunsTwice) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isJobWrite reports whether cmd runs put.lua, put_now.lua, reschedule.lua,
// cancel_waiting.lua or cancel.lua by EVALSHA.
func isJobWrite(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 2 || a[0] != "evalsha" {
		return false
	}
	for _, sc := range []*redis.Script{store.Named("put.lua"), store.Named("put_now.lua"), store.Named("reschedule.lua"), store.Named("cancel_waiting.lua"), store.Named("cancel.lua")} {
		if a[1] == sc.Hash() {
			return true
		}
	}
	return false
}

// TestJobCallsRetriedReportTheirFirstRun: every write of a job call runs
// twice on the server, the first run's reply lost. Put, Reschedule and
// Cancel still report what the first run did (each call's receipt), also
// when the sweeper takes the job between the two runs, and never put,
// move or cancel a second time; a later call is a call of its own.
func TestJobCallsRetriedReportTheirFirstRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		t0 := clk.Now()
		var h jobRunsTwice
		rdb := b.client(t)
		rdb.AddHook(&h)
		r := must[*Set](t)(Open(ctx, rdb, s.Name(), WithRecordedConfiguration(), WithClock(clk.Now)))
		// Loaded first (on every master of a cluster): every call is an
		// EVALSHA, none a NOSCRIPT that runs nothing.
		for _, sc := range []*redis.Script{store.Named("put.lua"), store.Named("put_now.lua"), store.Named("reschedule.lua"), store.Named("cancel_waiting.lua"), store.Named("cancel.lua")} {
			if err := sc.Load(ctx, rdb).Err(); err != nil {
				t.Fatal(err)
			}
		}

		due, put, err := r.Put(ctx, "a", time.Minute, WithPayload([]byte("p")))
		if err != nil || !put || !due.Equal(t0.Add(time.Minute)) {
			t.Fatalf("Put run twice: %v %v %v, want %v true", due, put, err, t0.Add(time.Minute))
		}
		if again, put, err := r.Put(ctx, "a", time.Second); err != nil || put || !again.Equal(due) {
			t.Fatalf("a second Put run twice: %v %v %v, want %v false", again, put, err, due)
		}
		if d, err := r.Reschedule(ctx, "a", time.Hour); err != nil || !d.Equal(t0.Add(time.Hour)) {
			t.Fatalf("Reschedule run twice: %v %v", d, err)
		}
		if _, err := r.Reschedule(ctx, "never", time.Hour); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Reschedule of no job run twice: %v, want ErrNotFound", err)
		}
		if ok, err := r.Cancel(ctx, "a"); err != nil || !ok {
			t.Fatalf("Cancel run twice: %v %v, want true", ok, err)
		}
		if ok, err := r.Cancel(ctx, "a"); err != nil || ok {
			t.Fatalf("a second Cancel run twice: %v %v, want false", ok, err)
		}

		// Due at once: the first run writes its event (the sweeper,
		// run between the two, has nothing to do); the retry writes no
		// second.
		w := newSweeper(t, s)
		sweep := func() { must[SweepStats](t)(w.SweepOnce(ctx)) }
		h.between.Store(&sweep)
		if due, put, err := r.Put(ctx, "now", 0, WithPayload([]byte("once"))); err != nil || !put || !due.Equal(t0) {
			t.Fatalf("Put due at once run twice: %v %v %v, want %v true", due, put, err, t0)
		}
		h.between.Store(nil)
		evs := readAll(t, s)
		if len(evs) != 1 || evs[0].Member != "now" || string(evs[0].Payload) != "once" {
			t.Fatalf("events %+v, want job now once", evs)
		}
		if j := must[Job](t)(s.Job(ctx, "now")); j != (Job{State: "waiting", Due: t0}) {
			t.Fatalf("Job now: %+v, want its event waiting alone", j)
		}
		// Its event is cancelled by the first run: the retry reports it.
		if ok, err := r.Cancel(ctx, "now"); err != nil || !ok {
			t.Fatalf("Cancel of a swept job run twice: %v %v, want true", ok, err)
		}
		if evs := readAll(t, s); len(evs) != 0 {
			t.Fatalf("events after Cancel: %+v", evs)
		}
		// Due in a millisecond, and swept between the two runs (the clock
		// moved past it): the retry puts no second job.
		soon := t0.Add(time.Millisecond)
		sweepLater := func() { clk.Advance(time.Millisecond); sweep() }
		h.between.Store(&sweepLater)
		if due, put, err := r.Put(ctx, "soon", time.Millisecond, WithPayload([]byte("once"))); err != nil || !put || !due.Equal(soon) {
			t.Fatalf("Put swept between its runs: %v %v %v, want %v true", due, put, err, soon)
		}
		h.between.Store(nil)
		if evs := readAll(t, s); len(evs) != 1 || evs[0].Member != "soon" || !evs[0].Deadline.Equal(soon) {
			t.Fatalf("events %+v, want job soon once", evs)
		}
		if h.n.Load() == 0 {
			t.Fatal("no job call was sent twice")
		}
		// Reschedule whose job the sweeper takes between the runs.
		must[time.Time](t)(func() (time.Time, error) { d, _, err := s.Put(ctx, "b", time.Hour); return d, err }())
		h.between.Store(&sweep)
		if d, err := r.Reschedule(ctx, "b", 0); err != nil || !d.Equal(soon) {
			t.Fatalf("Reschedule swept between its runs: %v %v, want %v", d, err, soon)
		}
		h.between.Store(nil)
		if evs := readAll(t, s); len(evs) != 2 || evs[1].Member != "b" && evs[0].Member != "b" {
			t.Fatalf("events %+v, want jobs soon and b once each", evs)
		}
	})
}

// TestJobReceipts: a job call's receipt outlives its client's retries
// (their span, 10s at least) and lapses; a client that never
// sends a call again gets none, unless the set waits for
// WithDurability's acknowledgements (which may run a call again).
func TestJobReceipts(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	open := func(o *redis.Options, opts ...OpenOption) *Set {
		o.Addr = mr.Addr()
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return must[*Set](t)(Open(ctx, c, "receipts", append([]OpenOption{WithExpiryEvents()}, opts...)...))
	}
	for _, c := range []struct {
		o    redis.Options
		want time.Duration
	}{
		{redis.Options{}, 24 * time.Second}, // go-redis's defaults: 4 x (5 s + 1 s)
		{redis.Options{ReadTimeout: 10 * time.Second}, 4 * 11 * time.Second},
		{redis.Options{ReadTimeout: 30 * time.Second, MaxRetries: 1}, 2 * 31 * time.Second},
		{redis.Options{ReadTimeout: time.Second, MaxRetryBackoff: -1}, 10 * time.Second},
		{redis.Options{MaxRetries: -1}, 0},
	} {
		if got := open(&c.o).st.JobReceiptMillis(); got != c.want.Milliseconds() {
			t.Errorf("%+v: receipts last %d ms, want %v", c.o, got, c.want)
		}
	}
	s := open(&redis.Options{MaxRetries: -1})
	if _, put, err := s.Put(ctx, "j", time.Minute); err != nil || !put {
		t.Fatalf("Put: %v %v", put, err)
	}
	if ok, err := s.Cancel(ctx, "j"); err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	for _, k := range mr.Keys() {
		if strings.Contains(k, "}:r:#") {
			t.Fatalf("receipt %s from a client that never sends a call again", k)
		}
	}
	s = open(&redis.Options{})
	if _, put, err := s.Put(ctx, "j", time.Minute); err != nil || !put {
		t.Fatalf("Put: %v %v", put, err)
	}
	var receipts []string
	for _, k := range mr.Keys() {
		if strings.Contains(k, "}:r:#") {
			receipts = append(receipts, k)
			if ttl := mr.TTL(k); ttl != 24*time.Second {
				t.Errorf("receipt %s: TTL %v, want 24s", k, ttl)
			}
		}
	}
	if len(receipts) != 1 {
		t.Fatalf("receipts %q, want one", receipts)
	}
	mr.FastForward(time.Minute)
	if mr.Exists(receipts[0]) {
		t.Fatal("the receipt did not lapse")
	}
}
