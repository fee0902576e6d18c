package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Call is one script run: what a builder makes (Op, Shard, Script, Keys,
// Args) and, once run, its reply and error. Each script's file builds its
// Call with a method named after the script and a "Call" suffix
// (addCall), and reads Reply with a function named after the script and a
// "read" prefix (readAdd).
type Call struct {
	Op     string // the operation Hooks.OnCall reports: "add", "acquire", ...
	Shard  int    // the shard it runs on, -1 when it spans several
	Script *redis.Script
	Keys   []string
	Args   []any

	Reply   any   // the reply (nil for a nil reply)
	Err     error // the error, wrapped as "expset: <op> <first key>: <error>"
	Durable bool  // WithDurability's acknowledgements came (RunWrites)

	// handover, when set, builds the call to run instead when this one
	// replies -1, which says it changed nothing and leaves the call to
	// that call's script (a script of a common case handing a rarer one to
	// the script of every case). Run and RunPipelined run it in place:
	// the Call becomes the one handover builds, and OnCall sees both runs.
	// (RunWrites' wait in a pipeline, WithDurability, does not: no call
	// run through it has one.)
	handover func() *Call
}

// handedOver reports whether c ran and handed its call over (see
// Call.handover): then c becomes the call it hands over to, not yet run.
func (c *Call) handedOver() bool {
	if c.handover == nil || c.Err != nil || c.Reply != int64(-1) {
		return false
	}
	*c = *c.handover()
	return true
}

// Run runs c by EVALSHA, falling back to EVAL (which loads the script) on
// NOSCRIPT, sets its Reply and Err (a false reply from Lua comes back as a
// nil Reply and no error) and reports it to OnCall.
func (s *Store) Run(ctx context.Context, c *Call) {
	s.runOn(ctx, s.rdb, c)
}

// run builds c and runs it: the shape of every method that runs one script.
func (s *Store) run(ctx context.Context, c *Call) (any, error) {
	s.Run(ctx, c)
	return c.Reply, c.Err
}

// runOn is Run through rdb.
func (s *Store) runOn(ctx context.Context, rdb redis.Scripter, c *Call) {
	var start time.Time
	if s.onCall != nil {
		start = time.Now()
	}
	v, err := c.Script.Run(ctx, rdb, c.Keys, c.Args...).Result()
	var took time.Duration
	if s.onCall != nil {
		took = time.Since(start)
	}
	s.finish(ctx, c, v, err, took)
	if c.handedOver() {
		s.runOn(ctx, rdb, c)
	}
}

// RunPipelined runs calls in one pipeline (one round trip per node): each
// by EVALSHA, and a call whose script the server did not know again by Run,
// which loads it. Each call's reply and error land in the call; OnCall sees
// every call, with the pipeline's duration; the calls handed over (see
// Call.handover) run again, in a pipeline of their own.
func (s *Store) RunPipelined(ctx context.Context, calls []*Call) {
	s.runPipelinedOn(ctx, s.rdb, calls)
}

// scriptClient is what runPipelinedOn sends through: the store's client,
// or one connection of it (WithDurability).
type scriptClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// runPipelinedOn is RunPipelined through rdb.
func (s *Store) runPipelinedOn(ctx context.Context, rdb scriptClient, calls []*Call) {
	if len(calls) == 1 {
		s.runOn(ctx, rdb, calls[0])
		return
	}
	start := time.Now()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.Script.EvalSha(ctx, pipe, c.Keys, c.Args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	took := time.Since(start)
	for i, c := range calls {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			s.runOn(ctx, rdb, c)
			continue
		}
		s.settle(ctx, c, cmds[i], took)
	}
	var again []*Call
	for _, c := range calls {
		if c.handedOver() {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		s.runPipelinedOn(ctx, rdb, again)
	}
}

// settle sets c's reply and error from cmd, its pipelined run, as finish
// does, with the pipeline's duration, took.
func (s *Store) settle(ctx context.Context, c *Call, cmd *redis.Cmd, took time.Duration) {
	v, err := cmd.Result()
	s.finish(ctx, c, v, err, took)
}

// finish sets c's reply v and error err (a nil reply as nil, an error
// wrapped as "expset: <op> <first key>: <error>"), and reports the call to
// OnCall with its duration, took.
func (s *Store) finish(ctx context.Context, c *Call, v any, err error, took time.Duration) {
	if errors.Is(err, redis.Nil) {
		v, err = nil, nil
	}
	if err != nil {
		err = fmt.Errorf("expset: %s %s: %w", c.Op, c.Keys[0], err)
	}
	c.Reply, c.Err = v, err
	if s.onCall != nil {
		s.onCall(ctx, c.Op, c.Shard, took, err)
	}
}
