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

// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT (go-redis's
// Script.Run), so a flushed script cache costs one extra round trip.
var (
	scriptAdd      = bucketed.add
	scriptAcquire  = bucketed.acquire
	scriptMany     = bucketed.many
	scriptRemove   = loadLean("wait_gate.lua", "remove.lua")
	scriptExtend   = bucketed.extend
	scriptDeadline = loadScript("deadline.lua")
	scriptCount    = loadScript("count.lua")
	scriptMembers  = loadScript("members.lua")
	scriptPayload  = loadScript("payload.lua")
	scriptOpen     = loadScript("open.lua")
	scriptSweep    = loadScript("sweep.lua")
	scriptKick     = loadScript("kick.lua")
	scriptRenew    = loadScript("wait_gate.lua", "wait_renew.lua")
	scriptLeave    = loadScript("wait_gate.lua", "wait_leave.lua")

	// The consumer-group scripts share lua/groups.lua.
	scriptAck     = loadScript("groups.lua", "ack.lua")
	scriptBegin   = loadScript("groups.lua", "begin.lua")
	scriptBury    = loadScript("groups.lua", "bury.lua")
	scriptClaim   = loadScript("groups.lua", "claim.lua")
	scriptRelease = loadScript("groups.lua", "release.lua")
	scriptPrune   = loadScript("groups.lua", "prune.lua")
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

// deadlineWriters are the scripts that write deadlines to owner keys, and
// with them the keys' TTLs, built for one TTL bucket (lua/prelude.lua's
// TTL_BUCKET).
type deadlineWriters struct{ add, extend, acquire, many *redis.Script }

var (
	// bucketed serves the sets this version recorded: an owner key lives to
	// the end of its latest deadline's ttlBucket, and a write skips the
	// PEXPIRE when the key already reaches its deadline's bucket.
	bucketed = newDeadlineWriters(ttlBucket)
	// exact serves the sets an earlier version recorded (their configuration
	// a string, not a hash). That version's processes set an owner key's TTL
	// to its latest deadline exactly, so a key may reach no further than that
	// while they still run beside this one: a bucketed write would skip a
	// PEXPIRE the key needs, and its member would vanish before its
	// deadline. A bucket of 1 ms refreshes the TTL whenever the new deadline
	// is later than every one the key holds, as that version did.
	exact = newDeadlineWriters(time.Millisecond)
)

// newDeadlineWriters builds the deadline-writing scripts for a TTL bucket of
// b (a whole number of milliseconds).
func newDeadlineWriters(b time.Duration) deadlineWriters {
	bucket := func(src string) *redis.Script {
		const decl = "local TTL_BUCKET = 16384\n"
		if !strings.Contains(src, decl) {
			panic("expset: lua/prelude.lua does not declare " + strings.TrimSpace(decl))
		}
		return redis.NewScript(strings.Replace(src, decl, "local TTL_BUCKET = "+strconv.FormatInt(b.Milliseconds(), 10)+"\n", 1))
	}
	return deadlineWriters{
		add:     bucket(luaSource(true, "add.lua")),
		extend:  bucket(luaSource(true, "extend.lua")),
		acquire: bucket(acquireSource()),
		many:    bucket(manySource()),
	}
}

// writers returns the deadline-writing scripts for s's owner keys.
func (s *Set) writers() *deadlineWriters {
	if s.exactTTL {
		return &exact
	}
	return &bucketed
}

// loadScript returns lua/prelude.lua followed by lua/<names...> as one
// script.
func loadScript(names ...string) *redis.Script {
	return redis.NewScript(luaSource(false, names...))
}

// loadLean is loadScript for the lean scripts, whose common paths build no
// closure: the prelude comes without its helpers section (see
// lua/prelude.lua).
func loadLean(names ...string) *redis.Script {
	return redis.NewScript(luaSource(true, names...))
}

// The lines that open and close the prelude's helpers section.
const (
	helpersOpen  = "-- helpers {\n"
	helpersClose = "-- } helpers\n"
)

func luaSource(lean bool, names ...string) string {
	var src []byte
	for _, name := range append([]string{"prelude.lua"}, names...) {
		b := []byte(readLua(name))
		if lean && name == "prelude.lua" {
			b = withoutHelpers(b)
		}
		if len(src) > 0 {
			src = append(src, '\n')
		}
		src = append(src, b...)
	}
	return string(src)
}

// acquireSource returns acquire.lua with lua/quota.lua after it as its body,
// the offsets quota.lua adds to its KEYS and ARGV indices (0 here) left out.
func acquireSource() string {
	quota := strings.NewReplacer("ko + ", "", "ao + ", "").Replace(readLua("quota.lua"))
	return luaSource(true, "wait_gate.lua", "acquire.lua") + "\n" + quota
}

// readLua returns the embedded lua/<name>.
func readLua(name string) string {
	b, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic("expset: embedded lua/" + name + " missing: " + err.Error())
	}
	return string(b)
}

// manySource returns acquire_many.lua with lua/quota.lua before it as the
// body of the function admit(keys, ko, nk, argv, ao, na, now) (see both
// files).
func manySource() string {
	return luaSource(true, "wait_gate.lua") +
		"\nlocal admit_used, admit_moved = 0, 0\nlocal function admit(keys, ko, nk, argv, ao, na, now)\n" +
		readLua("quota.lua") + "end\n" + readLua("acquire_many.lua")
}

// withoutHelpers returns the prelude without its helpers section.
func withoutHelpers(prelude []byte) []byte {
	s := string(prelude)
	i := strings.Index(s, helpersOpen)
	j := strings.Index(s, helpersClose)
	if i < 0 || j < i {
		panic("expset: lua/prelude.lua has no helpers section")
	}
	return []byte(s[:i] + s[j+len(helpersClose):])
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
		v, err := cmds[i].Result()
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			c.v, c.err = s.runOn(ctx, rdb, c.op, c.shard, c.sc, c.keys, c.args...)
			continue
		}
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
