package expset

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// crashInHandler runs a Consume of s's events as consumer name of group, on
// rdb, a client of its own, whose handler records the event it is given, closes
// that client (the process is gone: its lease is renewed no more, nothing is
// acknowledged) and blocks until t ends. It returns the event once the
// handler has it. The handlers of other events are never called.
func crashInHandler(t *testing.T, rdb redis.UniversalClient, s *Set, group, name string, opts ...ConsumeOption) Expiry {
	t.Helper()
	_, e, _ := crashAfter(t, rdb, s, group, name, 0, opts...)
	return e
}

// crashAfter is crashInHandler after handled handler calls that returned nil
// (returned first, in call order): the crash comes in the next call. It
// also returns the time from the first call to the crashing one.
func crashAfter(t *testing.T, rdb redis.UniversalClient, s *Set, group, name string, handled int, opts ...ConsumeOption) ([]Expiry, Expiry, time.Duration) {
	t.Helper()
	quiet := WithHooks(Hooks{OnError: func(context.Context, CallInfo, time.Duration) {}})
	doomed := must[*Set](t)(Open(context.Background(), rdb, s.Name(), quiet, WithRecordedConfiguration()))
	var ok []Expiry // written by the handler only, read once got has its event
	var first time.Time
	var took time.Duration
	got := make(chan Expiry, 1)
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = doomed.Consume(ctx, group, name, func(_ context.Context, e Expiry) error {
			if first.IsZero() {
				first = time.Now()
			}
			if len(ok) < handled {
				ok = append(ok, e)
				return nil
			}
			took = time.Since(first)
			select {
			case got <- e:
			default:
				return errors.New("after the crash")
			}
			_ = rdb.Close()
			<-release
			return errors.New("crashed")
		}, opts...)
	}()
	t.Cleanup(func() {
		close(release)
		cancel()
		<-done
	})
	select {
	case e := <-got:
		return ok, e, took
	case <-done:
		t.Fatal("the doomed Consume returned before its handler was called")
	}
	return nil, Expiry{}, 0
}

// consumers lists the consumers of group on every shard of s (shard/name).
func consumers(t *testing.T, rdb redis.UniversalClient, s *Set, group string) []string {
	t.Helper()
	var out []string
	for i := range s.shards {
		cs, err := rdb.XInfoConsumers(context.Background(), s.shards[i].Events, group).Result()
		if err != nil {
			t.Fatalf("XINFO CONSUMERS shard %d: %v", i, err)
		}
		for _, c := range cs {
			out = append(out, itoa(int64(i))+"/"+c.Name)
		}
	}
	return out
}

// hookRecorder keeps what Hooks.OnEvent and Hooks.OnError were given.
type hookRecorder struct {
	mu     sync.Mutex
	events []eventReport
	errs   []errorReport
}

func (h *hookRecorder) hooks() Hooks {
	return Hooks{
		OnEvent: func(_ context.Context, ci CallInfo, ei EventInfo) {
			e := eventReport{ci, ei}
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
		},
		OnError: func(_ context.Context, ci CallInfo, retry time.Duration) {
			e := errorReport{ci, retry}
			h.mu.Lock()
			h.errs = append(h.errs, e)
			h.mu.Unlock()
		},
	}
}

func (h *hookRecorder) deadLettered() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.events {
		if e.DeadLettered {
			n++
		}
	}
	return n
}

func (h *hookRecorder) errors() []errorReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]errorReport(nil), h.errs...)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
