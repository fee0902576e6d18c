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
	// and event handling alike.
	OnCall func(ctx context.Context, ci CallInfo)
	// OnAcquire follows every Acquire that Redis answered.
	OnAcquire func(ctx context.Context, ai AcquireInfo)
	// OnSweep follows every batch a Sweeper sweeps, and every other sweep
	// call whose event retention trimmed the stream (Batch false).
	OnSweep func(ctx context.Context, si SweepInfo)
	// OnEvent follows every handler call of Set.Consume, and every burial
	// of an event whose last handler call never finished, or that could not
	// be read as an event: each dead letter reaches it exactly once, with
	// DeadLettered set.
	OnEvent func(ctx context.Context, ei EventInfo)
	// OnError receives every error a background loop (Sweeper.Run,
	// Set.Consume) survives and will retry. When nil, those errors go to
	// log/slog's default logger at warning level, at most one line per op
	// and shard every 10 seconds, each with the count of errors not logged
	// since ("suppressed"). Errors that end a loop (misuse) are returned by
	// it instead, and errors after its ctx ended are not reported.
	OnError func(ctx context.Context, ei ErrorInfo)

	// OnWait follows every Quota.AcquireWait that waited, when it ends:
	// admitted, or given up. Waits counted, time waited and given up.
	OnWait func(ctx context.Context, wi WaitInfo)
}

// CallInfo describes one script round trip.
type CallInfo struct {
	Set      string        // the set's name
	Op       string        // "add", "acquire", "remove", "extend", "read", "sweep", ...
	Shard    int           // the shard the call went to, or -1 when it spans several
	Duration time.Duration // from sending to the reply, as the client saw it
	Err      error         // nil on success
}

// AcquireInfo describes one Acquire.
type AcquireInfo struct {
	Set      string
	Shard    int
	Decision Decision // Allowed, Existing, Evicted tell admitted, retried, denied and evicted apart
}

// SweepInfo describes one sweep batch of one shard.
type SweepInfo struct {
	Set      string
	Shard    int
	Batch    bool          // the call was given due owners (false: it only trimmed)
	Owners   int           // owners visited
	Expired  int           // members removed
	Lateness time.Duration // the largest now - deadline among the members removed (0 when none)
	Trimmed  int           // events retention removed unconsumed from the stream (WithEventRetention)
}

// EventInfo describes one handler call of an expiry event, or one burial
// that no handler call made (then Err says why, and Attempt is the attempts
// used).
type EventInfo struct {
	Set          string
	Group        string // the consumer group
	Shard        int
	Attempt      int   // 1 for the first handler call of the event in its group
	Err          error // the handler's error; nil when it succeeded
	DeadLettered bool  // the event moved to the dead-letter stream
}

// WithHooks installs hooks on the set (default none).
func WithHooks(h Hooks) Option {
	return setOption("WithHooks", func(c *setConfig) error { c.hooks = h; return nil })
}

// WaitInfo describes one Quota.AcquireWait that had to wait (one admitted
// by its first attempt is reported by OnAcquire alone).
type WaitInfo struct {
	Set      string
	Shard    int
	Waited   time.Duration // from joining the line to admission or giving up
	Admitted bool          // false: given up (its context ended, or Redis failed)
	Err      error         // why it gave up: the context's error, or Redis's
}
