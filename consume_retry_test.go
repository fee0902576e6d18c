package expset

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/store"
)

// lostBeginReplies is a go-redis hook that runs every script call beginning
// a handler call twice, as go-redis does when the server stalls past the
// client's read timeout and the call is retried: the server runs both, and
// the client sees the second reply only.
type lostBeginReplies struct{ n atomic.Int32 }

func (h *lostBeginReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostBeginReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isBeginCall(cmd) {
			h.n.Add(1)
			_ = next(ctx, cmd) // its reply is lost
		}
		return next(ctx, cmd)
	}
}

func (h *lostBeginReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if isBeginCall(cmd) {
				h.n.Add(1)
				_ = next(ctx, cmds) // the whole pipeline is sent again
				break
			}
		}
		return next(ctx, cmds)
	}
}

// beginHashes are the SHA1s of the scripts that begin handler calls,
// begins.lua and begin_fresh.lua.
var beginHashes = []string{store.Named("begins.lua").Hash(), store.Named("begin_fresh.lua").Hash()}

// isBeginCall reports whether cmd runs a script that begins handler
// calls.
func isBeginCall(cmd redis.Cmder) bool {
	a := cmd.Args()
	return len(a) >= 2 && a[0] == "evalsha" && slices.Contains(beginHashes, fmt.Sprint(a[1]))
}

// TestConsumeRetriedBeginCountsOnce: every script call that begins a
// handler call runs twice on the server (a retry by the client after a
// timeout). Each handler call still counts one attempt: with
// WithMaxAttempts(1) every event is handled and none is dead-lettered, and
// with 5 every first call sees Attempt 1.
func TestConsumeRetriedBeginCountsOnce(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		for _, maxAttempts := range []int{1, defaultMaxAttempts} {
			const n = 10
			s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
			expire(t, s, clk, n)
			var lost lostBeginReplies
			rdb := b.client(t)
			rdb.AddHook(&lost)
			retried := must[*Set](t)(Open(context.Background(), rdb, s.Name(), WithRecordedConfiguration()))
			h := newHandledBy()
			stop := consumeInBackground(t, retried, "g", "c", func(_ context.Context, e Expiry) error {
				return h.call("c", e, nil)
			}, WithMaxAttempts(maxAttempts), WithLeaseTTL(600*time.Millisecond), WithPollInterval(5*time.Millisecond))
			waitFor(t, "every event handled or dead-lettered", func() bool { return drained(s) })
			stop()
			if lost.n.Load() == 0 {
				t.Fatal("no begin was sent twice")
			}
			if d := deadKeys(t, s); len(d) != 0 {
				t.Errorf("WithMaxAttempts(%d): dead letters without a failed handler call: %v", maxAttempts, d)
			}
			for _, e := range h.events() {
				if e.Attempt != 1 {
					t.Errorf("WithMaxAttempts(%d): %s: first call at attempt %d, want 1", maxAttempts, eventKey(e), e.Attempt)
				}
			}
			if got := len(h.events()); got != n {
				t.Errorf("WithMaxAttempts(%d): %d handler calls, want %d", maxAttempts, got, n)
			}
			if f := b.rdb.HLen(context.Background(), s.shards[0].Att).Val() + b.rdb.HLen(context.Background(), s.shards[1].Att).Val(); f != 0 {
				t.Errorf("%d attempt fields left", f)
			}
		}
	})
}
