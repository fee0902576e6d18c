package expset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// TestBackoffDelay: the default schedule doubles from its first delay and
// stops at its limit; jitter takes at most a quarter off; first 0 means at
// once; no attempt number overflows.
func TestBackoffDelay(t *testing.T) {
	none := func(time.Duration) time.Duration { return 0 }
	all := func(n time.Duration) time.Duration { return n }
	wild := func(n time.Duration) time.Duration { return 10*n + 1 } // out of range: clamped
	for _, c := range []struct {
		first, limit time.Duration
		attempt      int
		jitter       func(time.Duration) time.Duration
		want         time.Duration
	}{
		{time.Second, 5 * time.Minute, 1, none, time.Second},
		{time.Second, 5 * time.Minute, 2, none, 2 * time.Second},
		{time.Second, 5 * time.Minute, 3, none, 4 * time.Second},
		{time.Second, 5 * time.Minute, 9, none, 256 * time.Second},
		{time.Second, 5 * time.Minute, 10, none, 5 * time.Minute},
		{time.Second, 5 * time.Minute, 1000, none, 5 * time.Minute},
		{time.Second, 5 * time.Minute, math.MaxInt, none, 5 * time.Minute},
		{time.Second, 5 * time.Minute, 1, all, 750 * time.Millisecond},
		{time.Second, 5 * time.Minute, 1000, all, 225 * time.Second},
		{time.Second, 5 * time.Minute, 2, wild, 1500 * time.Millisecond},
		{0, 0, 5, all, 0},
		{0, time.Hour, 5, none, 0},
		{maxRetryLimit, maxRetryLimit, 1000, none, maxRetryLimit},
		{time.Millisecond, time.Millisecond, 0, none, time.Millisecond},
	} {
		if got := backoffDelay(c.first, c.limit, c.attempt, c.jitter); got != c.want {
			t.Errorf("backoffDelay(%v, %v, attempt %d) = %v, want %v", c.first, c.limit, c.attempt, got, c.want)
		}
	}
}

// TestRetryAfterAndBuryWrap: both keep their error visible to errors.Is
// and errors.As and keep its text; nil errors and negative delays do what
// their docs say.
func TestRetryAfterAndBuryWrap(t *testing.T) {
	base := fmt.Errorf("parse: %w", io.ErrUnexpectedEOF)
	for _, err := range []error{RetryAfter(base, time.Second), Bury(base), fmt.Errorf("outer: %w", Bury(base))} {
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%v: errors.Is misses the wrapped error", err)
		}
		if err.Error() != base.Error() && err.Error() != "outer: "+base.Error() {
			t.Errorf("text %q, want %q", err.Error(), base.Error())
		}
	}
	for _, c := range []struct {
		err   error
		text  string
		bury  bool
		after time.Duration
	}{
		{RetryAfter(nil, time.Minute), "expset: retry after 1m0s", false, time.Minute},
		{RetryAfter(base, -time.Second), base.Error(), false, 0},
		{RetryAfter(base, math.MinInt64), base.Error(), false, 0},
		{RetryAfter(base, math.MaxInt64), base.Error(), false, math.MaxInt64},
		{Bury(nil), "expset: buried by its handler", true, 0},
		{Bury(RetryAfter(base, time.Hour)), base.Error(), true, 0},
		{RetryAfter(Bury(base), time.Hour), base.Error(), false, time.Hour},
	} {
		v := verdictOf(c.err)
		if c.err == nil || v == nil || c.err.Error() != c.text || v.bury != c.bury || v.after != c.after {
			t.Errorf("%#v: text %q bury %v after %v, want %q %v %v", c.err, c.err.Error(), v.bury, v.after, c.text, c.bury, c.after)
		}
	}
	if verdictOf(base) != nil || handlerBuries(base) || handlerBuries(nil) {
		t.Error("a plain error taken for RetryAfter or Bury")
	}
}

// retryCalls is a go-redis hook that records, for every retry.lua call, the
// delay it sent and the entry's holder and idle time in the group's
// pending list read right after it ran.
type retryCalls struct {
	rdb redis.UniversalClient // reads the pending list
	mu  sync.Mutex
	got []retryCall
}

type retryCall struct {
	delay  time.Duration
	holder string
	idle   time.Duration
}

var retrySource = store.Source("now.lua", "groups.lua", "retry.lua")

func (h *retryCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *retryCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		// EVALSHA sha 3 stream att runo group consumer id delay vis token
		if err == nil && len(a) == 12 && (a[0] == "evalsha" && a[1] == store.Named("retry.lua").Hash() || a[0] == "eval" && a[1] == retrySource) {
			id := fmt.Sprint(a[8])
			p, _ := h.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: fmt.Sprint(a[3]), Group: fmt.Sprint(a[6]), Start: id, End: id, Count: 1}).Result()
			ms, _ := strconv.ParseInt(fmt.Sprint(a[9]), 10, 64)
			c := retryCall{delay: time.Duration(ms) * time.Millisecond}
			if len(p) == 1 {
				c.holder, c.idle = p[0].Consumer, p[0].Idle
			}
			h.mu.Lock()
			h.got = append(h.got, c)
			h.mu.Unlock()
		}
		return err
	}
}

func (h *retryCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *retryCalls) calls() []retryCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]retryCall(nil), h.got...)
}

// callTimes records when each handler call began.
type callTimes struct {
	mu sync.Mutex
	at []time.Time
	ev []Expiry
}

func (c *callTimes) add(e Expiry) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	c.ev = append(c.ev, e)
	return len(c.at)
}

func (c *callTimes) get() ([]time.Time, []Expiry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...), append([]Expiry(nil), c.ev...)
}

// retrySet opens s again on a client of its own that records every retry.
func retrySet(t *testing.T, b backend, s *Set) (*Set, *retryCalls) {
	t.Helper()
	h := &retryCalls{rdb: b.rdb}
	rdb := b.client(t)
	rdb.AddHook(h)
	return must[*Set](t)(Open(context.Background(), rdb, s.Name(), WithRecordedConfiguration())), h
}

// TestRetryBackoffGrowsAndCaps: an event whose handler always fails comes
// back after delays that double from WithRetryBackoff's first and stop at
// its limit, each within its jitter, every attempt counted once; the
// server holds each retry with the idle time that makes it due then (by
// the pending list's idle times, not the wall clock), and the event is
// dead-lettered on its last attempt with that attempt count.
func TestRetryBackoffGrowsAndCaps(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		const attempts = 6
		const first, limit, lease = 40 * time.Millisecond, 160 * time.Millisecond, 10 * time.Second
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 1)
		rs, h := retrySet(t, b, s)
		var ct callTimes
		stop := consumeInBackground(t, rs, "g", "c", func(_ context.Context, e Expiry) error {
			ct.add(e)
			return errors.New("always fails")
		}, WithMaxAttempts(attempts), WithRetryBackoff(first, limit), WithLeaseTTL(lease), WithPollInterval(10*time.Millisecond))
		waitFor(t, "the event dead-lettered", func() bool { return len(deadKeys(t, s)) == 1 })
		stop()
		at, evs := ct.get()
		if len(at) != attempts {
			t.Fatalf("%d handler calls, want %d", len(at), attempts)
		}
		for i, e := range evs {
			if e.Attempt != i+1 {
				t.Errorf("call %d saw Attempt %d", i+1, e.Attempt)
			}
		}
		calls := h.calls()
		if len(calls) != attempts-1 {
			t.Fatalf("%d retries scheduled, want %d", len(calls), attempts-1)
		}
		nominal := first
		for i, c := range calls {
			lo := nominal - nominal/4
			if c.delay < lo.Truncate(time.Millisecond) || c.delay > nominal {
				t.Errorf("retry %d: delay %v, want %v to %v", i+1, c.delay, lo, nominal)
			}
			if c.holder != retryHolder || c.idle < lease-c.delay {
				t.Errorf("retry %d: held by %q idle %v, want %q idle at least %v", i+1, c.holder, c.idle, retryHolder, lease-c.delay)
			}
			// The server keeps idle times in whole milliseconds.
			if gap := at[i+1].Sub(at[i]); gap < c.delay-time.Millisecond {
				t.Errorf("retry %d came back after %v, before its delay %v", i+1, gap, c.delay)
			}
			nominal = min(2*nominal, limit)
		}
		for _, d := range deadKeys(t, s) {
			if d.Event.Attempt != attempts || d.Error != "always fails" {
				t.Errorf("dead letter %+v, want %d attempts and the handler's error", d, attempts)
			}
		}
	})
}

// TestRetryAfterShorterAndLongerThanLease: a handler's RetryAfter sets when
// its event comes back, whether shorter than the lease TTL (claimable after
// the delay, held meanwhile with idle time lease TTL minus delay) or longer
// (held past several lease TTLs, not before its delay); attempts stay exact.
// The same with WithConcurrency, whose calls settle on their own goroutines.
func TestRetryAfterShorterAndLongerThanLease(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	for _, c := range []struct {
		name         string
		lease, delay time.Duration
		concurrency  int
	}{
		{"shorter", time.Minute, 500 * time.Millisecond, 1},
		{"longer", 150 * time.Millisecond, 1200 * time.Millisecond, 1},
		{"shorter,concurrency", time.Minute, 500 * time.Millisecond, 3},
		{"longer,concurrency", 150 * time.Millisecond, 1200 * time.Millisecond, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b backend) {
				s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
				expire(t, s, clk, 1)
				rs, h := retrySet(t, b, s)
				var ct callTimes
				stop := consumeInBackground(t, rs, "g", "c", func(_ context.Context, e Expiry) error {
					if ct.add(e) == 1 {
						return RetryAfter(errors.New("not yet"), c.delay)
					}
					return nil
				}, WithLeaseTTL(c.lease), WithPollInterval(10*time.Millisecond), WithConcurrency(c.concurrency))
				waitFor(t, "the event handled", func() bool { return drained(s) })
				stop()
				at, evs := ct.get()
				if len(evs) != 2 || evs[0].Attempt != 1 || evs[1].Attempt != 2 {
					t.Fatalf("calls %+v, want attempts 1 and 2", evs)
				}
				// The server keeps idle times in whole milliseconds.
				if gap := at[1].Sub(at[0]); gap < c.delay-time.Millisecond {
					t.Errorf("came back after %v, before its delay %v", gap, c.delay)
				}
				calls := h.calls()
				if len(calls) != 1 || calls[0].delay != c.delay || calls[0].holder != retryHolder {
					t.Fatalf("retries %+v, want one of %v held by %q", calls, c.delay, retryHolder)
				}
				if c.delay < c.lease && calls[0].idle < c.lease-c.delay {
					t.Errorf("held with idle %v, want at least %v", calls[0].idle, c.lease-c.delay)
				}
				if len(deadKeys(t, s)) != 0 {
					t.Error("dead-lettered")
				}
			})
		})
	}
}

// TestBuryDeadLettersAtOnce: a handler's Bury dead-letters its event at
// once, with attempts left, the attempts used and the error's text; the
// burial reaches OnEvent once. Bury(nil) buries too.
func TestBuryDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		var mu sync.Mutex
		var buried []EventInfo
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithHooks(Hooks{OnEvent: func(_ context.Context, _ CallInfo, ei EventInfo) {
			if ei.DeadLettered {
				mu.Lock()
				buried = append(buried, ei)
				mu.Unlock()
			}
		}}))
		expire(t, s, clk, 3)
		var ct callTimes
		stop := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error {
			ct.add(e)
			switch {
			case e.Owner == "o0":
				return Bury(fmt.Errorf("malformed: %w", io.ErrUnexpectedEOF))
			case e.Owner == "o1" && e.Attempt == 1:
				return RetryAfter(errors.New("again"), time.Millisecond)
			case e.Owner == "o1":
				return Bury(nil)
			}
			return nil
		}, WithMaxAttempts(5), WithLeaseTTL(time.Minute), WithPollInterval(10*time.Millisecond))
		waitFor(t, "two dead letters", func() bool { return len(deadKeys(t, s)) == 2 })
		waitFor(t, "the stream drained", func() bool { return drained(s) })
		stop()
		want := map[string]struct {
			attempts int
			err      string
		}{"o0": {1, "malformed: unexpected EOF"}, "o1": {2, "expset: buried by its handler"}}
		for _, d := range deadKeys(t, s) {
			w := want[d.Event.Owner]
			if d.Event.Attempt != w.attempts || d.Error != w.err {
				t.Errorf("%s: dead letter with %d attempts, error %q; want %d, %q", d.Event.Owner, d.Event.Attempt, d.Error, w.attempts, w.err)
			}
		}
		if _, evs := ct.get(); len(evs) != 4 {
			t.Errorf("%d handler calls, want 4", len(evs))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(buried) != 2 {
			t.Errorf("OnEvent saw %d burials, want 2", len(buried))
		}
	})
}

// TestRetryHolderMatchesLua: the Go and Lua names of the consumer that
// holds retries agree.
func TestRetryHolderMatchesLua(t *testing.T) {
	if want := "local RETRY_HOLDER = '" + retryHolder + "'"; !strings.Contains(store.Source("groups.lua"), want) {
		t.Errorf("lua/groups.lua lacks %q", want)
	}
}

// retryHostileRows adds the hostile-input rows of WithRetryBackoff,
// RetryAfter, Bury and the reserved consumer name. consume runs
// Set.Consume with opts and an ended context.
func retryHostileRows(row func(call, input string, want error, got string, run func(e *hostileEnv) (string, error)), consume func(e *hostileEnv, opts ...ConsumeOption) error) {
	for _, c := range []struct {
		desc         string
		first, limit time.Duration
		ok           bool
	}{
		{"WithRetryBackoff(-1ns, 1s)", -1, time.Second, false},
		{"WithRetryBackoff(1s, -1ns)", time.Second, -1, false},
		{"WithRetryBackoff(math.MinInt64, math.MaxInt64)", math.MinInt64, math.MaxInt64, false},
		{"WithRetryBackoff(2s, 1s) (limit below first)", 2 * time.Second, time.Second, false},
		{"WithRetryBackoff(1s, 24h+1ns)", time.Second, maxRetryLimit + 1, false},
		{"WithRetryBackoff(0, 0) (retries at once)", 0, 0, true},
		{"WithRetryBackoff(24h, 24h)", maxRetryLimit, maxRetryLimit, true},
	} {
		row("Set.Consume", c.desc, errIfNot(c.ok), okText(c.ok, "accepted"), func(e *hostileEnv) (string, error) {
			return "accepted", consume(e, WithRetryBackoff(c.first, c.limit))
		})
	}
	row("Set.Consume", `consumer "`+retryHolder+`" (reserved)`, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("consume-opts"), WithExpiryEvents())
		if err != nil {
			return "", err
		}
		return "", s.Consume(e.ctx, "g", retryHolder, func(context.Context, Expiry) error { return nil })
	})
	verdict := func(err error) string {
		v := verdictOf(err)
		if v.bury {
			return fmt.Sprintf("buries, text %q", err.Error())
		}
		return fmt.Sprintf("retries after %v, text %q", v.after, err.Error())
	}
	for _, c := range []struct {
		desc string
		err  error
	}{
		{"RetryAfter(nil, 1m)", RetryAfter(nil, time.Minute)},
		{"RetryAfter(err, -1ns)", RetryAfter(errors.New("e"), -1)},
		{"RetryAfter(err, math.MinInt64)", RetryAfter(errors.New("e"), math.MinInt64)},
		{"RetryAfter(err, math.MaxInt64)", RetryAfter(errors.New("e"), math.MaxInt64)},
		{"Bury(nil)", Bury(nil)},
		{"Bury(RetryAfter(err, 1h)) (the outermost wins)", Bury(RetryAfter(errors.New("e"), time.Hour))},
	} {
		call, _, _ := strings.Cut(c.desc, "(")
		row(call, c.desc, nil, verdict(c.err), func(e *hostileEnv) (string, error) { return verdict(c.err), nil })
	}
}

func errIfNot(ok bool) error {
	if ok {
		return nil
	}
	return ErrInvalidArgument
}

func okText(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}

// TestRetriesCounted: Stats and Groups count the events waiting for their
// retry delay, shorter and longer than the lease TTL, as pending and
// retrying; the dead letters of Bury count as dead.
func TestRetriesCounted(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 3)
		stop := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error {
			switch e.Owner {
			case "o0":
				return RetryAfter(nil, 30*time.Second) // shorter than the lease TTL
			case "o1":
				return RetryAfter(nil, time.Hour) // longer
			}
			return Bury(nil)
		}, WithLeaseTTL(time.Minute), WithPollInterval(10*time.Millisecond))
		defer stop()
		var retrying, pending, dead int64
		waitFor(t, "2 retries waiting, 2 pending and 1 dead letter", func() bool {
			gs, err := s.Groups(ctx)
			if err != nil || len(gs) != 1 {
				return false
			}
			// One read is not atomic: the buried event may count as
			// pending in it and as dead too. Wait for the settled state.
			retrying, pending, dead = gs[0].Retrying, gs[0].Pending, gs[0].Dead
			return retrying == 2 && pending == 2 && dead == 1
		})
		var st ShardStats
		for _, sh := range must[[]ShardStats](t)(s.Stats(ctx)) {
			st.Retrying += sh.Retrying
			st.Pending += sh.Pending
			st.Dead += sh.Dead
		}
		if st.Retrying != 2 || st.Pending != 2 || st.Dead != 1 {
			t.Errorf("Stats: %d retrying, %d pending, %d dead; want 2, 2, 1", st.Retrying, st.Pending, st.Dead)
		}
	})
}
