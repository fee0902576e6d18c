package store

import (
	"embed"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

// Each script is lua/prelude.lua, then the shared files it names, then its
// own file, joined unchanged with a newline between them (script): no Lua
// text is cut or replaced. The shared files are lib.lua (lib, the helpers
// of the rarer paths: only in the scripts that call it), now.lua (now_ms),
// wait_gate.lua (the owner's wait line), quota.lua (admit, the quota's
// decision), groups.lua (the consumer-group scripts' helpers: the attempts
// field, the owner slots and the pending list), forget.lua (theirs that
// read a stream's groups and delete or bury entries, after groups.lua),
// jobs.lua (the job scripts' look through the stream, after forget.lua),
// time_ms.lua (time_ms, the server's TIME in ms as a string) and
// write_now.lua (write_now, the event and wake-up of a job due at once),
// the last two for put_now.lua and reschedule_now.lua; each script's own
// file starts with its KEYS, ARGV and reply. A script includes only the
// shared files it uses: each local function a shared file defines costs
// the server about 700 instructions a call.
//
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT (go-redis's
// Script.Run), so a flushed script cache costs one extra round trip.
//
// Each script's builder and reader live beside it, in the Go file named
// after its own file (add.go for add.lua).
var (
	scriptAdd           = script("lib.lua", "add.lua")
	scriptAcquire       = script("lib.lua", "wait_gate.lua", "quota.lua", "acquire.lua")
	scriptAcquirePlain  = script("acquire_plain.lua")
	scriptMany          = script("lib.lua", "wait_gate.lua", "quota.lua", "acquire_many.lua")
	scriptRemove        = script("lib.lua", "wait_gate.lua", "remove.lua")
	scriptExtend        = script("lib.lua", "extend.lua")
	scriptDeadline      = script("now.lua", "deadline.lua")
	scriptCount         = script("now.lua", "count.lua")
	scriptMembers       = script("now.lua", "members.lua")
	scriptPayload       = script("now.lua", "payload.lua")
	scriptOpen          = script("open.lua")
	scriptSweep         = script("lib.lua", "now.lua", "sweep.lua")
	scriptKick          = script("lib.lua", "kick.lua")
	scriptJob           = script("groups.lua", "forget.lua", "jobs.lua", "job.lua")
	scriptCancel        = script("groups.lua", "forget.lua", "jobs.lua", "cancel.lua")
	scriptSchedule      = script("lib.lua", "now.lua", "schedule.lua")
	scriptWaitRenew     = script("lib.lua", "now.lua", "wait_gate.lua", "wait_renew.lua")
	scriptWaitLeave     = script("lib.lua", "now.lua", "wait_gate.lua", "wait_leave.lua")
	scriptRemoveGroup   = script("groups.lua", "forget.lua", "remove_group.lua")
	scriptRunning       = script("groups.lua", "forget.lua", "running.lua")
	scriptSweepers      = script("sweepers.lua")
	scriptPut           = script("put.lua")
	scriptPutNow        = script("time_ms.lua", "write_now.lua", "put_now.lua")
	scriptRescheduleNow = script("time_ms.lua", "write_now.lua", "reschedule_now.lua")
	scriptReschedule    = script("reschedule.lua")
	scriptCancelWaiting = script("cancel_waiting.lua")

	// The dead-letter scan of the expset command's web page, alone: it
	// uses nothing of prelude.lua.
	scriptDeadScan = redis.NewScript(file("deadscan.lua"))
)

// The consumer engine's scripts.
var (
	scriptAck    = script("groups.lua", "forget.lua", "ack.lua")
	scriptRenew  = script("groups.lua", "renew.lua")
	scriptBegins = script("groups.lua", "begins.lua")
	// begins.lua's most common call (every item fresh, no owner cap), alone.
	scriptBeginFresh = script("begin_fresh.lua")
	scriptBury       = script("groups.lua", "forget.lua", "bury.lua")
	scriptClaim      = script("now.lua", "groups.lua", "forget.lua", "claim.lua")
	scriptRelease    = script("groups.lua", "release.lua")
	scriptRetry      = script("now.lua", "groups.lua", "retry.lua")
	scriptPrune      = script("groups.lua", "forget.lua", "prune.lua")
	scriptPause      = script("pause.lua")

	// A group capped as a whole (WithGroupConcurrency): its call slots.
	scriptGroupTake  = script("group_take.lua")
	scriptGroupRenew = script("group_renew.lua")
	scriptGroupFree  = script("group_free.lua")
)

// MaxBatch is the most items one script call takes: members removed (Remove
// sends more in several calls), owners and members of one sweep round
// (WithOwnersPerBatch, WithMembersPerBatch), events read, acknowledged or
// kicked. A script's keys and unpack calls then stay far inside what Redis
// (about 8000 values) and miniredis (about 5000) accept. The scripts call it
// MAX_BATCH (lua/prelude.lua), also the most expired members one write drops.
const MaxBatch = 1000

// TTLBucket is the scripts' TTL_BUCKET (lua/prelude.lua): the owner key of a
// set without expiry events expires at the end of its latest deadline's
// bucket of this length, so it lives at most this long past the latest
// deadline it was given.
const TTLBucket = 16384 * time.Millisecond

// script returns the script made of lua/prelude.lua and lua/<names...>, in
// that order.
func script(names ...string) *redis.Script {
	src := Source(names...)
	sc := redis.NewScript(src)
	sources[sc] = src
	return sc
}

// sources maps each script made by script to its text, for the tests.
var sources = map[*redis.Script]string{}

// Source returns lua/prelude.lua and lua/<names...> joined by newlines: the
// text of the script made of them.
func Source(names ...string) string {
	var b strings.Builder
	for i, name := range append([]string{"prelude.lua"}, names...) {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(file(name))
	}
	return b.String()
}

// file returns the text of lua/<name>.
func file(name string) string {
	src, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic("expset: embedded lua/" + name + " missing: " + err.Error())
	}
	return string(src)
}

// named maps each script's own file to the script, for Named.
var named = map[string]*redis.Script{
	"add.lua": scriptAdd, "acquire.lua": scriptAcquire, "acquire_plain.lua": scriptAcquirePlain, "acquire_many.lua": scriptMany, "remove.lua": scriptRemove,
	"extend.lua": scriptExtend, "deadline.lua": scriptDeadline, "count.lua": scriptCount, "members.lua": scriptMembers,
	"payload.lua": scriptPayload, "open.lua": scriptOpen, "sweep.lua": scriptSweep, "kick.lua": scriptKick,
	"job.lua": scriptJob, "cancel.lua": scriptCancel, "schedule.lua": scriptSchedule, "wait_renew.lua": scriptWaitRenew,
	"wait_leave.lua": scriptWaitLeave, "remove_group.lua": scriptRemoveGroup, "running.lua": scriptRunning,
	"sweepers.lua": scriptSweepers, "put.lua": scriptPut, "put_now.lua": scriptPutNow, "reschedule_now.lua": scriptRescheduleNow, "reschedule.lua": scriptReschedule, "cancel_waiting.lua": scriptCancelWaiting,
	"deadscan.lua": scriptDeadScan,
	"ack.lua":      scriptAck, "renew.lua": scriptRenew, "begins.lua": scriptBegins, "begin_fresh.lua": scriptBeginFresh, "bury.lua": scriptBury,
	"claim.lua": scriptClaim, "release.lua": scriptRelease, "retry.lua": scriptRetry, "prune.lua": scriptPrune,
}

// Named returns the script whose own file is file ("add.lua"), nil for
// none.
func Named(file string) *redis.Script { return named[file] }

// All returns every script of the package.
func All() []*redis.Script {
	var out []*redis.Script
	for _, sc := range named {
		out = append(out, sc)
	}
	return out
}
