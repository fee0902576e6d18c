package expset

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Each script is lua/prelude.lua, then the shared files it names, then its
// own file, joined unchanged with a newline between them (script): no Lua
// text is cut or replaced. The shared files are now.lua (now_ms),
// wait_gate.lua (the owner's wait line), quota.lua (admit, the quota's
// decision), groups.lua (the consumer-group scripts' helpers) and jobs.lua
// (the job scripts' look through the stream, after groups.lua); each
// script's own file starts with its KEYS, ARGV and reply.
//
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT (go-redis's
// Script.Run), so a flushed script cache costs one extra round trip.
var (
	scriptAdd      = script("add.lua")
	scriptAcquire  = script("wait_gate.lua", "quota.lua", "acquire.lua")
	scriptMany     = script("wait_gate.lua", "quota.lua", "acquire_many.lua")
	scriptRemove   = script("wait_gate.lua", "remove.lua")
	scriptExtend   = script("extend.lua")
	scriptDeadline = script("now.lua", "deadline.lua")
	scriptCount    = script("now.lua", "count.lua")
	scriptMembers  = script("now.lua", "members.lua")
	scriptPayload  = script("now.lua", "payload.lua")
	scriptOpen     = script("open.lua")
	scriptSweep    = script("now.lua", "sweep.lua")
	scriptKick     = script("kick.lua")
	scriptJob      = script("groups.lua", "jobs.lua", "job.lua")
	scriptCancel   = script("groups.lua", "jobs.lua", "cancel.lua")
	scriptSchedule = script("now.lua", "schedule.lua")
	scriptRenew    = script("now.lua", "wait_gate.lua", "wait_renew.lua")
	scriptLeave    = script("now.lua", "wait_gate.lua", "wait_leave.lua")

	scriptAck         = script("groups.lua", "ack.lua")
	scriptLeaseRenew  = script("groups.lua", "renew.lua")
	scriptBegins      = script("groups.lua", "begins.lua")
	scriptBury        = script("groups.lua", "bury.lua")
	scriptClaim       = script("now.lua", "groups.lua", "claim.lua")
	scriptRelease     = script("groups.lua", "release.lua")
	scriptRetry       = script("now.lua", "groups.lua", "retry.lua")
	scriptPrune       = script("groups.lua", "prune.lua")
	scriptRemoveGroup = script("groups.lua", "remove_group.lua")
	scriptRunning     = script("now.lua", "groups.lua", "running.lua")

	// The same with the owner slots of WithOwnerConcurrency (slots.lua).
	scriptAckSlots        = script("groups.lua", "slots.lua", "ack.lua")
	scriptLeaseRenewSlots = script("groups.lua", "slots.lua", "renew.lua")
	scriptBeginsSlots     = script("groups.lua", "slots.lua", "begins.lua")
	scriptTakeSlots       = script("groups.lua", "slots.lua", "take.lua")
	scriptBurySlots       = script("groups.lua", "slots.lua", "bury.lua")
	scriptReleaseSlots    = script("groups.lua", "slots.lua", "release.lua")
	scriptRetrySlots      = script("now.lua", "groups.lua", "slots.lua", "retry.lua")

	// The job calls' writes (Set.Put and Set.Reschedule, Set.Cancel's first).
	scriptPut           = script("put.lua")
	scriptCancelWaiting = script("cancel_waiting.lua")
)

// maxBatch is the most items one script call takes: members removed (Remove
// sends more in several calls), owners and members of one sweep round
// (WithOwnersPerBatch, WithMembersPerBatch), events read, acknowledged or
// kicked. A script's keys and unpack calls then stay far inside what Redis
// (about 8000 values) and miniredis (about 5000) accept. The scripts call it
// MAX_BATCH (lua/prelude.lua), also the most expired members one write drops.
const maxBatch = 1000

// ttlBucket is the scripts' TTL_BUCKET (lua/prelude.lua): the owner key of a
// set without expiry events expires at the end of its latest deadline's
// bucket of this length, so it lives at most this long past the latest
// deadline it was given.
const ttlBucket = 16384 * time.Millisecond

// script returns the script made of lua/prelude.lua and lua/<names...>, in
// that order.
func script(names ...string) *redis.Script {
	return redis.NewScript(luaSource(names...))
}

// luaSource returns lua/prelude.lua and lua/<names...> joined by newlines.
func luaSource(names ...string) string {
	var b strings.Builder
	for i, name := range append([]string{"prelude.lua"}, names...) {
		src, err := luaFS.ReadFile("lua/" + name)
		if err != nil {
			panic("expset: embedded lua/" + name + " missing: " + err.Error())
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.Write(src)
	}
	return b.String()
}

// scriptCall is one script run of a batch sent with runPipelined.
type scriptCall struct {
	op    string
	shard int
	sc    *redis.Script
	keys  []string
	args  []any
	v     any   // the reply (nil for a nil reply)
	err   error // wrapped as Set.run wraps it

	durable bool // WithDurability's acknowledgements came (runWrites)
}

// runPipelined runs calls in one pipeline (one round trip per node): each
// by EVALSHA, and a call whose script the server did not know again by
// Set.run, which loads it. Each call's reply and error land in the call;
// Hooks.OnCall sees every call, with the pipeline's duration.
func (s *Set) runPipelined(ctx context.Context, calls []*scriptCall) {
	s.runPipelinedOn(ctx, s.rdb, calls)
}

// scriptClient is what runPipelinedOn sends through: the set's client, or
// one connection of it (WithDurability).
type scriptClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// runPipelinedOn is runPipelined through rdb.
func (s *Set) runPipelinedOn(ctx context.Context, rdb scriptClient, calls []*scriptCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.v, c.err = s.runOn(ctx, rdb, c.op, c.shard, c.sc, c.keys, c.args...)
		return
	}
	start := time.Now()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.sc.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	took := time.Since(start)
	for i, c := range calls {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			c.v, c.err = s.runOn(ctx, rdb, c.op, c.shard, c.sc, c.keys, c.args...)
			continue
		}
		s.settle(ctx, c, cmds[i], took)
	}
}

// settle sets c's reply and error from cmd, its pipelined run (a nil reply
// as nil, an error wrapped as Set.run wraps it), and reports the call to
// Hooks.OnCall with the pipeline's duration, took.
func (s *Set) settle(ctx context.Context, c *scriptCall, cmd *redis.Cmd, took time.Duration) {
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		v, err = nil, nil
	}
	if err != nil {
		err = fmt.Errorf("expset: %s %s: %w", c.op, c.keys[0], err)
	}
	c.v, c.err = v, err
	if s.hooks.OnCall != nil {
		s.hooks.OnCall(ctx, CallInfo{Set: s.name, Op: c.op, Shard: c.shard, Duration: took, Err: err})
	}
}

// Script replies are checked here: a reply of the wrong shape is an
// errUnexpectedReply error naming the script, never a panic.

func unexpected(script string, v any) error {
	return fmt.Errorf("%w from %s: %T %v", errUnexpectedReply, script, v, v)
}

// asInt64 reads an integer reply, or an exact integer given as a string (a
// score as Redis formats it).
func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n, true
		}
		f, err := strconv.ParseFloat(x, 64)
		if err != nil || f != float64(int64(f)) {
			return 0, false
		}
		return int64(f), true
	}
	return 0, false
}

func asString(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

// parseMembers reads a flat member, deadline, member, deadline... list.
func parseMembers(script string, v any) ([]Member, error) {
	xs, ok := v.([]any)
	if !ok || len(xs)%2 != 0 {
		return nil, unexpected(script, v)
	}
	out := make([]Member, 0, len(xs)/2)
	for i := 0; i < len(xs); i += 2 {
		id, ok1 := asString(xs[i])
		ms, ok2 := asInt64(xs[i+1])
		if !ok1 || !ok2 {
			return nil, unexpected(script, v)
		}
		out = append(out, Member{ID: id, Deadline: msTime(ms)})
	}
	return out, nil
}

// batches groups items into script calls of at most maxBatch items each,
// one open call per key (a shard, or a group and shard): the renewals, the
// begins and the acknowledgements that go in one pipeline.
type batches[K comparable, T any] struct {
	calls []*scriptCall
	items [][]T
	open  map[K]int
}

// add adds item under key to the open call of key, or to a new one that
// newCall makes when there is none or it is full, and returns the call, to
// which the caller appends item's arguments.
func (b *batches[K, T]) add(key K, item T, newCall func() *scriptCall) *scriptCall {
	if b.open == nil {
		b.open = map[K]int{}
	}
	j, ok := b.open[key]
	if !ok || len(b.items[j]) >= maxBatch {
		j = len(b.calls)
		b.open[key] = j
		b.calls = append(b.calls, newCall())
		b.items = append(b.items, nil)
	}
	b.items[j] = append(b.items[j], item)
	return b.calls[j]
}
