package expsetotel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/expset/expset/expsetotel"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Spans of an Acquire made in a request's span. A program leaves
// WithTracerProvider out to use otel.GetTracerProvider(), or passes its own;
// this one keeps the spans in memory to print them.
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	ctx := context.Background()
	hooks := expsetotel.Hooks(expsetotel.WithTracerProvider(tp))
	orders, err := expset.Open(ctx, rdb, "orders", expset.WithHooks(hooks))
	if err != nil {
		log.Fatal(err)
	}
	quota, err := expset.NewQuota(orders, 2)
	if err != nil {
		log.Fatal(err)
	}

	ctx, checkout := tp.Tracer("shop").Start(ctx, "checkout")
	if _, err := quota.Acquire(ctx, "user-42", "order-1", time.Minute); err != nil {
		log.Fatal(err)
	}
	checkout.End()

	for _, s := range spans.Ended() {
		fmt.Print(s.Name())
		if s.Parent().SpanID() == checkout.SpanContext().SpanID() {
			fmt.Print(" (in checkout)")
		}
		for _, kv := range s.Attributes() {
			fmt.Printf(" %s=%s", kv.Key, kv.Value.Emit())
		}
		fmt.Println()
	}
	// Output:
	// expset.acquire (in checkout) expset.set=orders expset.op=acquire expset.shard=11
	// expset.acquire.decision (in checkout) expset.set=orders expset.op=acquire expset.shard=11 expset.allowed=true expset.existing=false expset.evicted=0 expset.count=1 expset.limit=2
	// checkout
}

// Tracing and other hooks on one set: here a count of round trips, in a
// program typically expsetprom's metrics,
// Join(expsetprom.NewCollector().Hooks(), expsetotel.Hooks()).
func ExampleJoin() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	calls := 0 // the hooks run on the caller's goroutine: one goroutine here
	counting := expset.Hooks{OnCall: func(context.Context, expset.CallInfo) { calls++ }}
	hooks := expsetotel.Join(counting, expsetotel.Hooks())

	ctx := context.Background()
	orders, err := expset.Open(ctx, rdb, "orders", expset.WithHooks(hooks))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := orders.Add(ctx, "user-42", "order-1", time.Minute); err != nil {
		log.Fatal(err)
	}
	fmt.Println("round trips:", calls)
	// Output: round trips: 1
}
