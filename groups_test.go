package expset

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestGroupsListAndRemove: a set with two declared groups, "keep" and
// "typo"; typo dead-letters one event, then one of its consumers dies in a
// handler call holding what it read, while keep handles everything. Groups
// lists both with their lag, pending events and dead letters; RemoveGroup
// of typo releases all it held: its pending entries and attempt fields, its
// dead letters, the group on every shard, and the events only it still
// needed. A second RemoveGroup finds nothing (ErrNotFound).
func TestGroupsListAndRemove(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("keep", "typo"))
		opts := []ConsumeOption{WithLeaseTTL(time.Minute), WithPollInterval(5 * time.Millisecond), WithMaxAttempts(1)}
		expire(t, s, clk, 6)
		typo := newHandledBy()
		stop := consumeInBackground(t, s, "typo", "a", func(_ context.Context, e Expiry) error {
			if e.Owner == "o0" {
				return typo.call("a", e, errors.New("fails"))
			}
			return typo.call("a", e, nil)
		}, opts...)
		waitFor(t, "typo done with the first 6", func() bool { return len(typo.events()) == 6 })
		stop()
		for i := 6; i < 10; i++ {
			must[time.Time](t)(s.Add(ctx, "n"+itoa(int64(i)), "m", time.Second))
		}
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		crashInHandler(t, b.client(t), s, "typo", "b", opts...)
		keep := newHandledBy()
		stop = consumeInBackground(t, s, "keep", "k", func(_ context.Context, e Expiry) error {
			return keep.call("k", e, nil)
		}, opts...)
		groups := func() map[string]GroupInfo {
			out := map[string]GroupInfo{}
			for _, g := range must[[]GroupInfo](t)(s.Groups(ctx)) {
				out[g.Name] = g
			}
			return out
		}
		waitFor(t, "keep done with all 10", func() bool { g := groups()["keep"]; return keep.count() == 10 && g.Pending == 0 })
		stop()
		gs := groups()
		if k := gs["keep"]; len(gs) != 2 || k != (GroupInfo{Name: "keep", Shards: 2}) {
			t.Fatalf("groups %+v, want keep with nothing to do", gs)
		}
		ty := gs["typo"]
		if ty.Shards != 2 || ty.Dead != 1 || ty.Pending < 1 || ty.Pending+ty.Lag != 4 {
			t.Fatalf("typo %+v, want 2 shards, 1 dead letter, 4 events pending or unread", ty)
		}
		got := must[GroupInfo](t)(s.RemoveGroup(ctx, "typo"))
		if got.Shards != 2 || got.Dead != 1 || got.Pending != ty.Pending {
			t.Fatalf("RemoveGroup: %+v, want what Groups listed: %+v", got, ty)
		}
		if gs := groups(); len(gs) != 1 || gs["keep"].Name != "keep" {
			t.Fatalf("after RemoveGroup: %+v, want keep alone", gs)
		}
		for _, sk := range s.shards {
			if n := b.rdb.XLen(ctx, sk.Events).Val(); n != 0 {
				t.Errorf("%s: %d events left that no group needs", sk.Events, n)
			}
			if f := b.rdb.HGetAll(ctx, sk.Att).Val(); len(f) != 0 {
				t.Errorf("%s: attempt fields left: %v", sk.Att, f)
			}
			if n := b.rdb.XLen(ctx, sk.Dead).Val(); n != 0 {
				t.Errorf("%s: %d dead letters left", sk.Dead, n)
			}
		}
		if _, err := s.RemoveGroup(ctx, "typo"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second RemoveGroup: %v, want ErrNotFound", err)
		}
	})
}
