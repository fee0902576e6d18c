package expset

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/store"
)

// putSlot counts one more owner slot of owner in group, as begins.lua
// does.
func putSlot(t *testing.T, b backend, sk shardKeys, group, owner string) {
	t.Helper()
	must[int64](t)(b.rdb.HIncrBy(context.Background(), sk.Runo, store.SlotField(group, owner), 1).Result())
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
		putSlot(t, b, sk, "h", "other")

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
		must[int64](t)(b.rdb.HDel(ctx, sk.Runo, store.SlotField("h", "other")).Result())
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

// TestRunningDeadConsumer: the slot of a call whose consumer died counts
// until a consumer of the group claims its event (its lease lapsed); the
// call that consumer begins then holds one, which its acknowledgement
// frees. The reads change nothing.
func TestRunningDeadConsumer(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithConsumerGroups("g"))
		expireOwned(t, s, clk, []string{"o"}, 1)
		cfg := defaultConsumeConfig()
		cfg.ownerCap, cfg.leaseTTL = 2, 20*time.Millisecond
		dead := must[*consumer](t)(s.newConsumer("g", "dead", cfg))
		if got := dead.beginAll(ctx, dead.read(ctx, []int{0}, nil, 10)); len(got) != 1 {
			t.Fatalf("begun: %+v, want the event", got)
		}
		one := []OwnerCalls{{"o", 1}}
		before := snapshot(t, b.rdb, s.name)
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, one) {
			t.Errorf("Running: %v, want the dead consumer's call of o", got)
		}
		gs := must[[]GroupInfo](t)(s.Groups(ctx))
		if len(gs) != 1 || gs[0].Running != 1 || gs[0].RunningOwners != 1 {
			t.Errorf("Groups: %+v, want 1 call of 1 owner running", gs)
		}
		if after := snapshot(t, b.rdb, s.name); !reflect.DeepEqual(after, before) {
			t.Errorf("the reads changed the keys:\n%v\nto\n%v", before, after)
		}
		live := must[*consumer](t)(s.newConsumer("g", "live", cfg))
		var claimed []delivery
		waitFor(t, "the event claimed", func() bool {
			if b.mr != nil {
				b.mr.FastForward(cfg.leaseTTL)
			}
			claimed, _ = live.claim(ctx, 0, -1)
			return len(claimed) == 1
		})
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 10)); len(got) != 0 {
			t.Errorf("Running once claimed: %v, want none", got)
		}
		begun := live.beginAll(ctx, claimed)
		if len(begun) != 1 || begun[0].e.Attempt != 2 {
			t.Fatalf("begun by the claimer: %+v, want attempt 2", begun)
		}
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, one) {
			t.Errorf("Running: %v, want the claimer's call of o", got)
		}
		ack := s.st.AckCall(live.args(), 0, []store.Lease{{ID: begun[0].d.id, Token: begun[0].token}})
		s.st.RunPipelined(ctx, []*store.Call{ack})
		if held, err := store.ReadAck(ack, 1); err != nil || !held[0] {
			t.Fatalf("ack: %v %v", held, err)
		}
		if got := must[[]OwnerCalls](t)(s.Running(ctx, "g", 10)); len(got) != 0 {
			t.Errorf("Running once acknowledged: %v, want none", got)
		}
		if n := b.rdb.HLen(ctx, s.shards[0].Runo).Val(); n != 0 {
			t.Errorf("%d slot counts left", n)
		}
	})
}
