package expset

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// helperFailer is the failer role of TestHelperProcess: Consume as consumer
// "doomed" of group "g", with a handler that prints "fail <shard> <ID>
// <attempt>" and fails; the OnEvent hook that follows the failed call
// SIGKILLs the process, so it dies between the failed call and the round
// trip that would schedule its retry.
func helperFailer(s *Set, say func(string, ...any)) error {
	vis, err := time.ParseDuration(os.Getenv(helperVis))
	if err != nil {
		return err
	}
	die := WithHooks(Hooks{OnEvent: func(context.Context, CallInfo, EventInfo) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
	}})
	doomed, err := Open(context.Background(), s.rdb, s.Name(), WithRecordedConfiguration(), die)
	if err != nil {
		return err
	}
	return doomed.Consume(context.Background(), "g", "doomed", func(_ context.Context, e Expiry) error {
		say("fail %d %s %d", e.Shard, e.ID, e.Attempt)
		return errors.New("fails, then dies")
	}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithRetryBackoff(time.Millisecond, time.Millisecond))
}

// TestKillBetweenFailureAndRetry: a consumer process is SIGKILLed after its
// handler call failed and before its retry was scheduled. The event stays
// with the dead consumer, then comes back to another consumer once the
// lease TTL has passed, as attempt 2: nothing lost, no attempt miscounted,
// nothing dead-lettered.
func TestKillBetweenFailureAndRetry(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const vis = 500 * time.Millisecond
		ctx := context.Background()
		s := expiredSet(t, b, 1, 1)
		h := startHelper(t, "failer", append(b.env(s), helperVis+"="+vis.String())...)
		<-h.exited
		if calls := h.calls("fail"); len(calls) != 1 || !strings.HasSuffix(calls[0], " 1") {
			t.Fatalf("the helper made calls %q, want one at attempt 1; stderr:\n%s", calls, h.stderr.String())
		}
		p := must[[]redis.XPendingExt](t)(b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.shards[0].Events, Group: "g", Start: "-", End: "+", Count: 10}).Result())
		if len(p) != 1 || p[0].Consumer != "doomed" {
			t.Fatalf("pending after the kill: %+v, want the event held by the dead consumer", p)
		}
		heir := newHandledBy()
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			return heir.call("heir", e, nil)
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond))
		waitFor(t, "the event handled", func() bool { return drained(s) })
		stop()
		evs := heir.events()
		if len(evs) != 1 || evs[0].Attempt != 2 {
			t.Errorf("the heir's calls: %+v, want one at attempt 2", evs)
		}
		if d := deadKeys(t, s); len(d) != 0 {
			t.Errorf("dead letters: %v", d)
		}
	})
}
