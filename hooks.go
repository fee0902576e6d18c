package expset

import (
	"context"
	"time"
)

// Hooks receives what a Set, and the Quotas, Sweepers and consumers built on
// it, do: the way to feed metrics or traces without this package depending on
// a metrics library (see the expsetprom module for a collector built on
// it). Every field is optional; a nil func costs nothing. Hooks run
// synchronously on the goroutine that made the call, often concurrently, so
// they must be fast and safe for simultaneous use. Each receives the context
// of the call it reports (for a background loop, the loop's context), so a
// tracer can join the caller's span, and the shard the call went to as a
// value (-1 when it spans several). Fields may be added in later versions;
// set them by name.
type Hooks struct {
	// OnCall follows every script round trip: Set and Quota calls, sweeps
	// and event handling alike. Duration is the round trip as the client
	// saw it.
	OnCall func(ctx context.Context, ci CallInfo)
	// OnAcquire follows every Acquire that Redis answered (Op "acquire"),
	// with its Decision: Allowed, Existing and Evicted tell admitted,
	// retried, denied and evicted apart.
	OnAcquire func(ctx context.Context, ci CallInfo, d Decision)
	// OnSweep follows every batch a Sweeper sweeps (Op "sweep", st.Batches
	// 1), and every other sweep call whose event retention trimmed the
	// stream (st.Batches 0, st.Trimmed over 0). st counts that one call.
	OnSweep func(ctx context.Context, ci CallInfo, st SweepStats)
	// OnEvent follows every handler call of Set.Consume (Err the handler's
	// error), and every burial of an event whose last handler call never
	// finished, or that could not be read as an event (Err why): each dead
	// letter reaches it exactly once, with ei.DeadLettered set. Op is
	// "event".
	OnEvent func(ctx context.Context, ci CallInfo, ei EventInfo)
	// OnError receives every error a background loop (Sweeper.Run,
	// Set.Consume) survives and will retry after retry: ci.Op says what
	// failed ("sweep", "lease", "consume", "subscribe": the wake-ups'
	// subscription, ...), ci.Shard the shard it is
	// confined to (-1 when not shard-specific). When nil, those errors go
	// to log/slog's default logger at warning level, at most one line per op
	// and shard every 10 seconds, each with the count of errors not logged
	// since ("suppressed"). Errors that end a loop (misuse) are returned by
	// it instead, and errors after its ctx ended are not reported.
	OnError func(ctx context.Context, ci CallInfo, retry time.Duration)
	// OnWait follows every Quota.AcquireWait that waited, when it ends (Op
	// "wait"): Duration is the time from joining the line to admission or
	// giving up; Err is nil when admitted, else why it gave up (its
	// context's error, or Redis's). One admitted by its first attempt is
	// reported by OnAcquire alone.
	OnWait func(ctx context.Context, ci CallInfo)
}

// CallInfo is what every hook receives about the call it reports: which
// set, what operation, which shard, how long and how it ended. A tracer or
// metrics library needs nothing else to label what it records.
type CallInfo struct {
	Set      string        // the set's name
	Op       string        // "add", "acquire", "remove", "extend", "read", "sweep", "handle", "wait", ...
	Shard    int           // the shard the call went to, or -1 when it spans several
	Duration time.Duration // how long it took, where the hook's doc says so; zero otherwise
	Err      error         // nil on success
}

// EventInfo is what Hooks.OnEvent receives beside the CallInfo: the group
// and the attempt of one handler call of an expiry event, or of one burial
// that no handler call made (then Attempt is the attempts used).
type EventInfo struct {
	Group        string // the consumer group
	Attempt      int    // 1 for the first handler call of the event in its group
	DeadLettered bool   // the event moved to the dead-letter stream
}

// WithHooks installs hooks on the set (default none; the zero Hooks installs
// none).
func WithHooks(h Hooks) OpenOption {
	return openOption(func(c *setConfig) error { c.hooks = h; return nil })
}
