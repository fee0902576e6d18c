// Package expsetotel traces expset with OpenTelemetry. Hooks returns
// expset.Hooks that record a span for every script round trip a Set, its
// Quotas, Sweepers and consumers make, each a child of the span in the
// call's context, and a zero-length span for each Acquire decision and each
// expiry event handled. The package lives in its own module so that the core
// library does not make its users depend on OpenTelemetry.
//
//	orders, err := expset.Open(ctx, rdb, "orders", expset.WithHooks(expsetotel.Hooks()))
//
// Spans (every one carries expset.set, expset.op and, unless the call spans
// several shards, expset.shard):
//
//	expset.<op>              kind client, one per script round trip (Hooks.OnCall):
//	                         expset.add, expset.acquire, expset.sweep, ...;
//	                         it ends when the hook runs and starts CallInfo.Duration earlier
//	expset.wait              one per Quota.AcquireWait that waited (Hooks.OnWait), as long as it waited
//	expset.acquire.decision  zero-length, after each Acquire Redis answered (Hooks.OnAcquire):
//	                         expset.allowed, expset.existing, expset.evicted (a count),
//	                         expset.count, expset.limit
//	expset.event             zero-length, after each handler call of Set.Consume and each burial
//	                         (Hooks.OnEvent): expset.group, expset.attempt, expset.dead_lettered
//
// A span whose call failed records the error (an "exception" event) and has
// status Error. The decision and the event are zero-length spans rather than
// events on the span in the context: their hooks report no duration, the
// round trip's span has ended by then, and the context of an event's hook is
// Consume's, which usually carries no span or a long-lived one, where events
// would be lost or pile up. As spans they are kept, and searchable by their
// attributes, whatever the caller's span.
//
// Hooks.OnSweep and Hooks.OnError are left nil: a sweep's counts are
// metrics (see expsetprom), each sweep round trip is an expset.sweep span,
// and a nil OnError keeps the loops' default of logging the errors they
// survive (each failed round trip is a span with status Error). Join combines
// these hooks with others, such as expsetprom's.
package expsetotel

import (
	"context"
	"time"

	"github.com/expset/expset"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer the hooks use.
const ScopeName = "github.com/expset/expset/expsetotel"

// Option configures Hooks.
type Option func(*config)

type config struct {
	tp trace.TracerProvider
}

// WithTracerProvider sets the provider of the tracer that records the spans
// (default otel.GetTracerProvider() when Hooks is called, which follows a
// later otel.SetTracerProvider; nil keeps the default).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// Hooks returns hooks that record spans of what a set does; pass them to
// expset.Open with expset.WithHooks, alone or joined with others (Join).
// The hooks are safe for simultaneous use by multiple goroutines, and one
// Hooks value can serve any number of sets.
func Hooks(opts ...Option) expset.Hooks {
	cfg := config{tp: otel.GetTracerProvider()}
	for _, o := range opts {
		o(&cfg)
	}
	t := tracer{cfg.tp.Tracer(ScopeName)}
	return expset.Hooks{
		OnCall: func(ctx context.Context, ci expset.CallInfo) {
			t.record(ctx, "expset."+ci.Op, trace.SpanKindClient, ci)
		},
		OnWait: func(ctx context.Context, ci expset.CallInfo) {
			t.record(ctx, "expset.wait", trace.SpanKindInternal, ci)
		},
		OnAcquire: func(ctx context.Context, ci expset.CallInfo, d expset.Decision) {
			t.record(ctx, "expset.acquire.decision", trace.SpanKindInternal, ci,
				attribute.Bool("expset.allowed", d.Allowed),
				attribute.Bool("expset.existing", d.Existing),
				attribute.Int("expset.evicted", len(d.Evicted)),
				attribute.Int("expset.count", d.Count),
				attribute.Int("expset.limit", d.Limit))
		},
		OnEvent: func(ctx context.Context, ci expset.CallInfo, ei expset.EventInfo) {
			t.record(ctx, "expset.event", trace.SpanKindInternal, ci,
				attribute.String("expset.group", ei.Group),
				attribute.Int("expset.attempt", ei.Attempt),
				attribute.Bool("expset.dead_lettered", ei.DeadLettered))
		},
	}
}

type tracer struct{ trace.Tracer }

// record records one span, a child of the span in ctx, ending now and
// starting ci.Duration earlier.
func (t tracer) record(ctx context.Context, name string, kind trace.SpanKind, ci expset.CallInfo, extra ...attribute.KeyValue) {
	end := time.Now()
	attrs := make([]attribute.KeyValue, 0, 3+len(extra))
	attrs = append(attrs, attribute.String("expset.set", ci.Set), attribute.String("expset.op", ci.Op))
	if ci.Shard >= 0 {
		attrs = append(attrs, attribute.Int("expset.shard", ci.Shard))
	}
	_, span := t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(end.Add(-ci.Duration)),
		trace.WithAttributes(append(attrs, extra...)...))
	if ci.Err != nil {
		span.RecordError(ci.Err)
		span.SetStatus(codes.Error, ci.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}
