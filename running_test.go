package expset

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// putSlot writes an owner slot as slots.lua does: field ("<ID> <group>")
// of owner, with lease end end.
func putSlot(t *testing.T, b backend, sk shardKeys, field, owner string, end time.Time) {
	t.Helper()
	ctx := context.Background()
	must[int64](t)(b.rdb.ZAdd(ctx, sk.Run, redisZ(float64(end.UnixMilli()), field)).Result())
	must[int64](t)(b.rdb.HSet(ctx, sk.Runo, field, owner).Result())
	must[int64](t)(b.rdb.HIncrBy(ctx, sk.Runo, "#"+field[strings.IndexByte(field, ' ')+1:]+" "+owner, 1).Result())
}

// TestRunning: a Consume WithOwnerConcurrency(2) whose handler calls block
// until released holds a's 2 calls, b's 2 and c's 1; Running lists them,
// most calls first, cut at n, and Groups gives the totals, exactly. A slot
// of another group is not counted for the group. Once the calls are
// released, everything falls to zero.
func TestRunning(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithConsumerGroups("g", "h"))
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 10)); len(got) != 0 {
			t.Fatalf("Running before any call: %v, want none", got)
		}
		expireOwned(t, s, clk, []string{"a"}, 3)
		expireOwned(t, s, clk, []string{"b"}, 2)
		expireOwned(t, s, clk, []string{"c"}, 1)
		var (
			mu      sync.Mutex
			running int
		)
		release := make(chan struct{})
		stop := consumeInBackground(t, s, "g", "c1", func(ctx context.Context, e Expiry) error {
			mu.Lock()
			running++
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				mu.Unlock()
			}()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, WithOwnerConcurrency(2), WithConcurrency(8), WithPollInterval(5*time.Millisecond))
		defer stop()
		waitFor(t, "5 calls running", func() bool { mu.Lock(); defer mu.Unlock(); return running == 5 })

		// A live slot of group h, as a consumer of that group leaves it.
		sk := s.shards[0]
		putSlot(t, b, sk, "1-2 h", "other", time.Now().Add(time.Hour))

		want := []OwnerCalls{{"a", 2}, {"b", 2}, {"c", 1}}
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, want) {
			t.Errorf("Running(g, 10): %v, want %v", got, want)
		}
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 2)); !reflect.DeepEqual(got, want[:2]) {
			t.Errorf("Running(g, 2): %v, want %v", got, want[:2])
		}
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "h", 10)); !reflect.DeepEqual(got, []OwnerCalls{{"other", 1}}) {
			t.Errorf("Running(h, 10): %v, want other's one call", got)
		}
		groups := func() map[string]GroupInfo {
			out := map[string]GroupInfo{}
			for _, g := range must[[]GroupInfo](t)(s.Groups(ctx)) {
				out[g.Name] = g
			}
			return out
		}
		gs := groups()
		if g := gs["g"]; g.Running != 5 || g.RunningOwners != 3 {
			t.Errorf("Groups: g %+v, want 5 calls running of 3 owners", g)
		}
		if h := gs["h"]; h.Running != 1 || h.RunningOwners != 1 {
			t.Errorf("Groups: h %+v, want 1 call running of 1 owner", h)
		}
		close(release)
		waitFor(t, "every event of g handled and acknowledged", func() bool { g := groups()["g"]; return g.Pending == 0 && g.Lag == 0 })
		stop()
		must[int64](t)(b.rdb.ZRem(ctx, sk.Run, "1-2 h").Result())
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 10)); len(got) != 0 {
			t.Errorf("Running after the calls ended: %v, want none", got)
		}
		if g := groups()["g"]; g.Running != 0 || g.RunningOwners != 0 {
			t.Errorf("Groups after the calls ended: %+v, want 0 running", g)
		}
	})
}

// TestRunningInput: Running refuses n out of range and an empty group
// (ErrInvalidArgument), a group no shard has (ErrNotFound), and a set
// without expiry events; a set that never used WithOwnerConcurrency lists
// none and counts zeros.
func TestRunningInput(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(3), WithExpiryEvents(), WithConsumerGroups("g"))
		for _, c := range []struct {
			group string
			n     int
			want  error
		}{{"g", 0, ErrInvalidArgument}, {"g", maxRunningOwners + 1, ErrInvalidArgument}, {"", 1, ErrInvalidArgument}, {"nope", 1, ErrNotFound}} {
			if _, err := s.Running(ctx, c.group, c.n); !errors.Is(err, c.want) {
				t.Errorf("Running(%q, %d): %v, want %v", c.group, c.n, err, c.want)
			}
		}
		if got, err := s.Running(ctx, "g", maxRunningOwners); err != nil || len(got) != 0 {
			t.Errorf("Running(g): %v %v, want none", got, err)
		}
		gs := must[[]GroupInfo](t)(s.Groups(ctx))
		if len(gs) != 1 || gs[0] != (GroupInfo{Name: "g", Shards: 3}) {
			t.Errorf("Groups: %+v, want g with zeros", gs)
		}
		plain, _ := newTestSet(t, b)
		if _, err := plain.Running(ctx, "g", 1); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Running on a set without events: %v, want ErrInvalidArgument", err)
		}
	})
}

// TestRunningDeadSlots: a slot whose lease end has passed (its consumer
// died) is not counted, and the reads leave it for the next begin to drop;
// a live one of the same owner is.
func TestRunningDeadSlots(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithConsumerGroups("g"))
		sk := s.shards[1]
		putSlot(t, b, sk, "1-1 g", "o", time.Now().Add(-time.Second))
		putSlot(t, b, sk, "1-2 g", "o", time.Now().Add(time.Hour))
		putSlot(t, b, sk, "1-3 g", "dead", time.Now().Add(-time.Second))
		before := snapshot(t, b.rdb, s.name)
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, []OwnerCalls{{"o", 1}}) {
			t.Errorf("Running: %v, want o's one live call", got)
		}
		gs := must[[]GroupInfo](t)(s.Groups(ctx))
		if len(gs) != 1 || gs[0].Running != 1 || gs[0].RunningOwners != 1 {
			t.Errorf("Groups: %+v, want 1 call of 1 owner running", gs)
		}
		if after := snapshot(t, b.rdb, s.name); !reflect.DeepEqual(after, before) {
			t.Errorf("the reads changed the keys:\n%v\nto\n%v", before, after)
		}
	})
}
