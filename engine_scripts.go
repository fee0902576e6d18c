package expset

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/store"
)

// The consumer engine's files (begin.go, leases.go, settle.go, reader.go,
// retry.go, reserve.go, owners.go) still build their scripts' calls and
// read their replies themselves; these names serve them until those
// builders and readers move into internal/store beside their scripts, as
// every other script's have (internal/store/add.go for add.lua, ...).

// scriptCall is one script run of the engine: a store.Call.
type scriptCall = store.Call

// batches groups the engine's calls by shard (store.Batches).
type batches[K comparable, T any] = store.Batches[K, T]

// The engine's scripts (internal/store/scripts.go).
var (
	scriptAck             = store.Ack
	scriptLeaseRenew      = store.LeaseRenew
	scriptBegins          = store.Begins
	scriptTake            = store.Take
	scriptBury            = store.Bury
	scriptClaim           = store.Claim
	scriptRelease         = store.Release
	scriptRetry           = store.Retry
	scriptPrune           = store.Prune
	scriptAckSlots        = store.AckSlots
	scriptLeaseRenewSlots = store.RenewSlots
	scriptBeginsSlots     = store.BeginsSlots
	scriptTakeSlots       = store.TakeSlots
	scriptBurySlots       = store.BurySlots
	scriptReleaseSlots    = store.ReleaseSlots
	scriptRetrySlots      = store.RetrySlots
)

// maxBatch is store.MaxBatch: the most items one script call takes.
const maxBatch = store.MaxBatch

// unexpected is store.Unexpected: the error of a reply v of the wrong
// shape from script.
func unexpected(script string, v any) error { return store.Unexpected(script, v) }

// asInt64 is store.Int64.
func asInt64(v any) (int64, bool) { return store.Int64(v) }

// asString is store.String.
func asString(v any) (string, bool) { return store.String(v) }

// run runs one of the engine's scripts (store.Store.Run) and returns its
// reply and error.
func (s *Set) run(ctx context.Context, op string, shard int, sc *redis.Script, keys []string, args ...any) (any, error) {
	c := &store.Call{Op: op, Shard: shard, Script: sc, Keys: keys, Args: args}
	s.st.Run(ctx, c)
	return c.Reply, c.Err
}

// runPipelined runs the engine's calls in one pipeline
// (store.Store.RunPipelined).
func (s *Set) runPipelined(ctx context.Context, calls []*scriptCall) {
	s.st.RunPipelined(ctx, calls)
}
