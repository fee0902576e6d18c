package expset

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestHooksSeeCallsAndDecisions(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var (
			mu        sync.Mutex
			calls     = map[string]int{}
			failed    int
			decisions []Decision
			shards    = map[int]bool{}
		)
		h := Hooks{
			OnCall: func(_ context.Context, c CallInfo) {
				mu.Lock()
				defer mu.Unlock()
				calls[c.Op]++
				shards[c.Shard] = true
				if c.Err != nil {
					failed++
				}
				if c.Duration <= 0 {
					t.Errorf("call %s took %v", c.Op, c.Duration)
				}
			},
			OnAcquire: func(_ context.Context, ci CallInfo, d Decision) {
				mu.Lock()
				defer mu.Unlock()
				decisions = append(decisions, d)
				if ci.Op != "acquire" || ci.Set == "" {
					t.Errorf("OnAcquire saw %+v", ci)
				}
			},
		}
		s, _ := newTestSet(t, b, WithHooks(h), WithShards(4))
		q := must[*Quota](t)(NewQuota(s, 1))
		must[time.Time](t)(s.Add(ctx, "u", "a", time.Minute))
		must[bool](t)(s.Contains(ctx, "u", "a"))
		must[int](t)(s.Count(ctx, "u"))
		must[[]Member](t)(s.Members(ctx, "u", 0))
		must[Decision](t)(q.Acquire(ctx, "v", "x", time.Minute))
		must[Decision](t)(q.Acquire(ctx, "v", "y", time.Minute))
		must[int](t)(s.Remove(ctx, "u", "a"))
		b.rdb.Set(ctx, s.OwnerKey("w"), "wrong type", 0)
		if _, err := s.Add(ctx, "w", "m", time.Minute); err == nil {
			t.Fatal("Add over a string key succeeded")
		}

		mu.Lock()
		defer mu.Unlock()
		want := map[string]int{"add": 2, "deadline": 1, "count": 1, "members": 1, "acquire": 2, "remove": 1}
		for op, n := range want {
			if calls[op] != n {
				t.Errorf("OnCall saw %d %q calls, want %d (all: %v)", calls[op], op, n, calls)
			}
		}
		if failed != 1 {
			t.Errorf("OnCall saw %d failures, want 1", failed)
		}
		for sh := range shards {
			if sh < 0 || sh >= 4 {
				t.Errorf("OnCall reported shard %d", sh)
			}
		}
		if len(decisions) != 2 || !decisions[0].Allowed || decisions[1].Allowed {
			t.Errorf("OnAcquire saw %+v", decisions)
		}
	})
}

func TestHooksSeeSweepsAndEvents(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		var (
			mu     sync.Mutex
			sweeps []sweepReport
			events []eventReport
		)
		h := Hooks{
			OnSweep: func(_ context.Context, ci CallInfo, st SweepStats) {
				mu.Lock()
				sweeps = append(sweeps, sweepReport{ci, st})
				mu.Unlock()
			},
			OnEvent: func(_ context.Context, ci CallInfo, ei EventInfo) {
				mu.Lock()
				events = append(events, eventReport{ci, ei})
				mu.Unlock()
			},
		}
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage(), WithShards(1), WithHooks(h))
		expire(t, s, clk, 3) // sweeps 3 members
		mu.Lock()
		if len(sweeps) != 1 || sweeps[0].Expired != 3 || sweeps[0].Owners != 3 || sweeps[0].Shard != 0 || sweeps[0].Set != s.Name() {
			t.Errorf("OnSweep saw %+v", sweeps)
		}
		mu.Unlock()

		// The handler fails o0's event every time: attempts 1 and 2, then
		// dead-lettered; the others succeed at once.
		stop := consumeInBackground(t, s, "g", "c1", func(_ context.Context, e Expiry) error {
			if e.Owner == "o0" {
				return errors.New("payment service down")
			}
			return nil
		}, append(fastConsume, WithMaxAttempts(2))...)
		waitFor(t, "o0 dead-lettered", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range events {
				if e.DeadLettered {
					return true
				}
			}
			return false
		})
		stop()
		mu.Lock()
		defer mu.Unlock()
		var ok, failed, dead int
		for _, e := range events {
			switch {
			case e.DeadLettered:
				dead++
				if e.Attempt != 2 || e.Err == nil {
					t.Errorf("dead-lettered event %+v", e)
				}
			case e.Err != nil:
				failed++
			default:
				ok++
			}
		}
		if ok != 2 || failed != 1 || dead != 1 {
			t.Errorf("OnEvent saw %d ok, %d failed, %d dead-lettered (%+v); want 2, 1, 1", ok, failed, dead, events)
		}
	})
}

// TestHooksCarryTheCallersContextAndShard checks that OnCall and OnAcquire
// receive the context the caller passed (so a tracer joins its span) and
// the shard of the owner the call was for.
func TestHooksCarryTheCallersContextAndShard(t *testing.T) {
	t.Parallel()
	type key struct{}
	eachBackend(t, func(t *testing.T, b backend) {
		var (
			mu      sync.Mutex
			seen    []string
			shards  []int
			foreign int
		)
		note := func(ctx context.Context, op string, shard int) {
			mu.Lock()
			defer mu.Unlock()
			v, _ := ctx.Value(key{}).(string)
			if v != "span-1" {
				foreign++
				return
			}
			seen = append(seen, op)
			shards = append(shards, shard)
		}
		s, _ := newTestSet(t, b, WithShards(8), WithHooks(Hooks{
			OnCall:    func(ctx context.Context, ci CallInfo) { note(ctx, ci.Op, ci.Shard) },
			OnAcquire: func(ctx context.Context, ci CallInfo, _ Decision) { note(ctx, "decision", ci.Shard) },
		}))
		q := must[*Quota](t)(NewQuota(s, 2))
		ctx := context.WithValue(context.Background(), key{}, "span-1")
		must[time.Time](t)(s.Add(ctx, "alice", "m", time.Minute))
		must[Decision](t)(q.Acquire(ctx, "alice", "n", time.Minute))
		mu.Lock()
		defer mu.Unlock()
		if foreign != 0 || len(seen) != 3 || seen[0] != "add" || seen[1] != "acquire" || seen[2] != "decision" {
			t.Fatalf("hooks saw %v (%d without the caller's context), want add, acquire, decision", seen, foreign)
		}
		for _, sh := range shards {
			if sh != s.ShardOf("alice") {
				t.Fatalf("shards %v, want %d each", shards, s.ShardOf("alice"))
			}
		}
	})
}
