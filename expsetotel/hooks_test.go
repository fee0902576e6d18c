package expsetotel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/expsetotel"
	"github.com/expset/expset/internal/redistest"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// newTracing returns a tracer provider whose ended spans rec holds.
func newTracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// durations records the Duration of each OnCall and OnWait, by op, to join
// with the tracing hooks.
type durations struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

func (d *durations) hooks() expset.Hooks {
	d.by = map[string][]time.Duration{}
	add := func(_ context.Context, ci expset.CallInfo) {
		d.mu.Lock()
		d.by[ci.Op] = append(d.by[ci.Op], ci.Duration)
		d.mu.Unlock()
	}
	return expset.Hooks{OnCall: add, OnWait: add}
}

func (d *durations) of(op string) []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.by[op]...)
}

// named returns the spans called name, in the order they ended.
func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkAttrs reports every attribute of s that differs from want, and any
// attribute s has beyond want.
func checkAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]any) {
	t.Helper()
	got := attrs(s)
	for k, w := range want {
		if g, ok := got[k]; !ok || g.AsInterface() != w {
			t.Errorf("%s: %s = %v, want %v", s.Name(), k, g.AsInterface(), w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected attribute %s = %v", s.Name(), k, g.AsInterface())
		}
	}
}

// checkChild reports unless s is a child of parent.
func checkChild(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.Span) {
	t.Helper()
	p := parent.SpanContext()
	if s.Parent().TraceID() != p.TraceID() || s.Parent().SpanID() != p.SpanID() || s.SpanContext().TraceID() != p.TraceID() {
		t.Errorf("%s: parent %s/%s, want the caller's span %s/%s", s.Name(),
			s.Parent().TraceID(), s.Parent().SpanID(), p.TraceID(), p.SpanID())
	}
}

// TestAcquireSpans: each Acquire is an expset.acquire client span of the
// round trip, as long as the hook's Duration and within the caller's span,
// and a zero-length expset.acquire.decision span with the decision, both
// children of the caller's span.
func TestAcquireSpans(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		tp, rec := newTracing(t)
		var took durations
		name := uuid.NewString()
		hooks := expsetotel.Join(expsetotel.Hooks(expsetotel.WithTracerProvider(tp)), took.hooks())
		set, err := expset.Open(context.Background(), rdb, name, expset.WithShards(4), expset.WithHooks(hooks))
		if err != nil {
			t.Fatal(err)
		}
		evicting, _ := expset.NewQuota(set, 1, expset.WithEvictOldest())
		strict, _ := expset.NewQuota(set, 1)

		ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
		for _, acquire := range []func() (expset.Decision, error){
			func() (expset.Decision, error) { return evicting.Acquire(ctx, "u", "a", time.Minute) }, // admitted
			func() (expset.Decision, error) { return evicting.Acquire(ctx, "u", "a", time.Minute) }, // existing
			func() (expset.Decision, error) { return strict.Acquire(ctx, "u", "b", time.Minute) },   // denied
			func() (expset.Decision, error) { return evicting.Acquire(ctx, "u", "c", time.Minute) }, // admitted, evicts a
		} {
			if _, err := acquire(); err != nil {
				t.Fatal(err)
			}
		}
		parent.End()

		calls, decisions := named(rec.Ended(), "expset.acquire"), named(rec.Ended(), "expset.acquire.decision")
		want := took.of("acquire")
		if len(calls) != 4 || len(decisions) != 4 || len(want) != 4 {
			t.Fatalf("%d expset.acquire and %d expset.acquire.decision spans for %d calls, want 4 each", len(calls), len(decisions), len(want))
		}
		shard := attrs(calls[0])["expset.shard"].AsInt64()
		if shard < 0 || shard >= 4 {
			t.Fatalf("expset.shard %d, want one of the 4 shards", shard)
		}
		outcomes := []struct {
			allowed, existing bool
			evicted           int64
		}{{true, false, 0}, {true, true, 0}, {false, false, 0}, {true, false, 1}}
		for i, s := range calls {
			checkChild(t, s, parent)
			if s.SpanKind() != trace.SpanKindClient || s.Status().Code != codes.Unset {
				t.Errorf("round trip %d: kind %v, status %v, want client and unset", i, s.SpanKind(), s.Status())
			}
			checkAttrs(t, s, map[attribute.Key]any{"expset.set": name, "expset.op": "acquire", "expset.shard": shard})
			if d := s.EndTime().Sub(s.StartTime()); d != want[i] || d <= 0 {
				t.Errorf("round trip %d lasts %v, the hook's Duration is %v", i, d, want[i])
			}
			if s.StartTime().Before(parent.(sdktrace.ReadOnlySpan).StartTime()) || s.EndTime().After(parent.(sdktrace.ReadOnlySpan).EndTime()) {
				t.Errorf("round trip %d, %v to %v, is not within the caller's span", i, s.StartTime(), s.EndTime())
			}

			d := decisions[i]
			checkChild(t, d, parent)
			if !d.StartTime().Equal(d.EndTime()) || d.StartTime().Before(s.EndTime()) {
				t.Errorf("decision %d: %v to %v, want zero-length, after its round trip ended at %v", i, d.StartTime(), d.EndTime(), s.EndTime())
			}
			o := outcomes[i]
			checkAttrs(t, d, map[attribute.Key]any{"expset.set": name, "expset.op": "acquire", "expset.shard": shard,
				"expset.allowed": o.allowed, "expset.existing": o.existing, "expset.evicted": o.evicted,
				"expset.count": int64(1), "expset.limit": int64(1)})
		}
	})
}

// TestFailedCallSpan: a round trip that fails is a span with the error
// recorded and status Error, still a child of the caller's span.
func TestFailedCallSpan(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		tp, rec := newTracing(t)
		set, err := expset.Open(context.Background(), rdb, uuid.NewString(),
			expset.WithHooks(expsetotel.Hooks(expsetotel.WithTracerProvider(tp))))
		if err != nil {
			t.Fatal(err)
		}
		ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		_, callErr := set.Add(ctx, "u", "a", time.Minute)
		parent.End()
		if !errors.Is(callErr, context.Canceled) {
			t.Fatalf("Add with an ended context: %v, want context.Canceled", callErr)
		}
		adds := named(rec.Ended(), "expset.add")
		if len(adds) != 1 {
			t.Fatalf("%d expset.add spans, want 1", len(adds))
		}
		s := adds[0]
		checkChild(t, s, parent)
		if s.Status().Code != codes.Error || s.Status().Description != callErr.Error() {
			t.Errorf("status %+v, want Error %q", s.Status(), callErr)
		}
		if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" {
			t.Errorf("events %+v, want one exception", ev)
		}
	})
}

// clock is a settable clock for expset.WithClock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestEventSpans: each handler call of Consume, and each burial, is a
// zero-length expset.event span with the group, the attempt and whether it
// was dead-lettered, a child of Consume's span; a failed one has status
// Error.
func TestEventSpans(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		tp, rec := newTracing(t)
		clk := &clock{now: time.Now()}
		name := uuid.NewString()
		set, err := expset.Open(context.Background(), rdb, name, expset.WithShards(1), expset.WithExpiryEvents(),
			expset.WithClock(clk.Now), expset.WithHooks(expsetotel.Hooks(expsetotel.WithTracerProvider(tp))))
		if err != nil {
			t.Fatal(err)
		}
		for _, owner := range []string{"ok", "fails"} {
			if _, err := set.Add(context.Background(), owner, "m", time.Second); err != nil {
				t.Fatal(err)
			}
		}
		clk.advance(2 * time.Second)
		sweeper, _ := expset.NewSweeper(set)
		if st, err := sweeper.SweepOnce(context.Background()); err != nil || st.Expired != 2 {
			t.Fatalf("sweep: %+v, %v; want 2 expired", st, err)
		}

		ctx, parent := tp.Tracer("test").Start(context.Background(), "consumer")
		ctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- set.Consume(ctx, "billing", "c1", func(_ context.Context, e expset.Expiry) error {
				if e.Owner == "fails" {
					return errors.New("boom")
				}
				return nil
			}, expset.WithMaxAttempts(1), expset.WithPollInterval(5*time.Millisecond))
		}()
		deadline := time.Now().Add(10 * time.Second)
		for len(named(rec.Ended(), "expset.event")) < 2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Consume: %v", err)
		}
		parent.End()

		events := named(rec.Ended(), "expset.event")
		if len(events) != 2 {
			t.Fatalf("%d expset.event spans, want 2", len(events))
		}
		var handled, buried int
		for _, s := range events {
			checkChild(t, s, parent)
			if !s.StartTime().Equal(s.EndTime()) {
				t.Errorf("event span %v to %v, want zero-length", s.StartTime(), s.EndTime())
			}
			want := map[attribute.Key]any{"expset.set": name, "expset.op": "event", "expset.shard": int64(0),
				"expset.group": "billing", "expset.attempt": int64(1), "expset.dead_lettered": false}
			if s.Status().Code == codes.Error {
				buried++
				want["expset.dead_lettered"] = true
				if !strings.Contains(s.Status().Description, "boom") {
					t.Errorf("dead letter's status %+v, want the handler's error", s.Status())
				}
			} else {
				handled++
			}
			checkAttrs(t, s, want)
		}
		if handled != 1 || buried != 1 {
			t.Errorf("%d handled and %d dead-lettered, want 1 each", handled, buried)
		}
	})
}

// TestSpanShapes feeds the hooks directly: a span lasts the CallInfo's
// Duration and ends when its hook runs, expset.shard is left out for calls
// that span shards, a wait given up is an Error, and the hooks left nil
// stay nil.
func TestSpanShapes(t *testing.T) {
	tp, rec := newTracing(t)
	h := expsetotel.Hooks(expsetotel.WithTracerProvider(tp))
	if h.OnSweep != nil || h.OnError != nil {
		t.Fatal("OnSweep or OnError set: a nil OnError keeps the loops' default logging")
	}
	before := time.Now()
	h.OnWait(context.Background(), expset.CallInfo{Set: "orders", Op: "wait", Shard: -1, Duration: 2 * time.Second, Err: context.DeadlineExceeded})
	h.OnCall(context.Background(), expset.CallInfo{Set: "orders", Op: "acquire-many", Shard: -1, Duration: 30 * time.Millisecond})
	after := time.Now()

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, want := range []struct {
		name   string
		kind   trace.SpanKind
		d      time.Duration
		status codes.Code
	}{
		{"expset.wait", trace.SpanKindInternal, 2 * time.Second, codes.Error},
		{"expset.acquire-many", trace.SpanKindClient, 30 * time.Millisecond, codes.Unset},
	} {
		s := spans[i]
		if s.Name() != want.name || s.SpanKind() != want.kind || s.Status().Code != want.status || s.Parent().IsValid() {
			t.Errorf("span %d: %s, kind %v, status %v, parent %v; want %s, kind %v, status %v, no parent",
				i, s.Name(), s.SpanKind(), s.Status().Code, s.Parent().IsValid(), want.name, want.kind, want.status)
		}
		if d := s.EndTime().Sub(s.StartTime()); d != want.d {
			t.Errorf("%s lasts %v, want the CallInfo's %v", s.Name(), d, want.d)
		}
		if s.EndTime().Before(before) || s.EndTime().After(after) {
			t.Errorf("%s ends at %v, not when its hook ran (%v to %v)", s.Name(), s.EndTime(), before, after)
		}
		checkAttrs(t, s, map[attribute.Key]any{"expset.set": "orders", "expset.op": strings.TrimPrefix(want.name, "expset.")})
	}
}

// TestDefaultTracerProvider: without WithTracerProvider the hooks use the
// global provider, including one set after Hooks was called.
func TestDefaultTracerProvider(t *testing.T) {
	h := expsetotel.Hooks()
	tp, rec := newTracing(t)
	otel.SetTracerProvider(tp) // no other test uses the global provider
	h.OnCall(context.Background(), expset.CallInfo{Set: "orders", Op: "add", Shard: 0})
	if s := rec.Ended(); len(s) != 1 || s[0].InstrumentationScope().Name != expsetotel.ScopeName {
		t.Fatalf("spans %v, want one from scope %s", s, expsetotel.ScopeName)
	}
}
