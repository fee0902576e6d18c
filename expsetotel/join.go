package expsetotel

import (
	"context"

	"github.com/expset/expset"
)

// Join returns hooks that call each of hs in the order given, for one set
// to feed traces and metrics at once:
//
//	c := expsetprom.NewCollector()
//	hooks := expsetotel.Join(c.Hooks(), expsetotel.Hooks())
//	orders, err := expset.Open(ctx, rdb, "orders", expset.WithHooks(hooks))
//
// A field of the result is nil when that field is nil in every one of hs,
// so a nil OnError stays nil and keeps the loops' default logging. Join of
// no hooks returns the zero Hooks.
func Join(hs ...expset.Hooks) expset.Hooks {
	var j expset.Hooks
	for _, h := range hs {
		j.OnCall = join2(j.OnCall, h.OnCall)
		j.OnWait = join2(j.OnWait, h.OnWait)
		j.OnAcquire = join3(j.OnAcquire, h.OnAcquire)
		j.OnSweep = join3(j.OnSweep, h.OnSweep)
		j.OnEvent = join3(j.OnEvent, h.OnEvent)
		j.OnError = join3(j.OnError, h.OnError)
	}
	return j
}

// join2 returns a hook that calls a, then b; nil when both are.
func join2(a, b func(context.Context, expset.CallInfo)) func(context.Context, expset.CallInfo) {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	return func(ctx context.Context, ci expset.CallInfo) { a(ctx, ci); b(ctx, ci) }
}

// join3 is join2 for the hooks that take one value more.
func join3[T any](a, b func(context.Context, expset.CallInfo, T)) func(context.Context, expset.CallInfo, T) {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	return func(ctx context.Context, ci expset.CallInfo, v T) { a(ctx, ci, v); b(ctx, ci, v) }
}
