package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestGroupSlots follows a capped group's call slots through their three
// scripts: takes are granted in order up to the cap, a take sent twice
// keeps what its first run got, a renewal renews only slots still held, a
// free frees (and publishes a wake-up only for a group at its cap), and a
// slot not renewed for its lease TTL lapses and goes to the next take.
func TestGroupSlots(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newTestStore(t, rdb, 1)
		g := s.NewGroupSlots("g", 3, time.Minute.Milliseconds())
		take := func(want int, tokens ...string) {
			t.Helper()
			n, err := s.GroupTake(ctx, g, tokens)
			if err != nil || n != want {
				t.Fatalf("take %v: %d slots (%v), want %d", tokens, n, err, want)
			}
		}
		holders := func(want ...string) {
			t.Helper()
			got, err := rdb.ZRange(ctx, g.Key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("slots held by %v, want %v", got, want)
			}
		}
		take(2, "a", "b")
		take(2, "a", "b") // sent twice: the same two
		take(1, "c", "d", "e")
		holders("a", "b", "c")
		take(0, "d")

		held, err := s.GroupRenew(ctx, g, []string{"b", "x", "c"})
		if err != nil || !slices.Equal(held, []bool{true, false, true}) {
			t.Fatalf("renew: %v %v", held, err)
		}
		holders("a", "b", "c")

		sub := rdb.Subscribe(ctx, g.Wake())
		if _, ok := rdb.(*redis.ClusterClient); ok || !plainPubSub(t, rdb) {
			sub.Close()
			sub = rdb.SSubscribe(ctx, g.Wake())
		}
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := s.GroupFree(ctx, g, []string{"a", "x"}); err != nil || n != 1 {
			t.Fatalf("free a group at its cap: %d (%v), want 1", n, err)
		}
		if m, err := sub.ReceiveMessage(ctx); err != nil || m.Payload != "g" {
			t.Fatalf("wake-up: %v %v", m, err)
		}
		if n, err := s.GroupFree(ctx, g, []string{"b"}); err != nil || n != 1 {
			t.Fatalf("free below the cap: %d (%v), want 1", n, err)
		}
		holders("c")

		// A slot not renewed lapses: the next take removes it.
		short := s.NewGroupSlots("g", 3, 50)
		take(2, "d", "e")
		if n, err := s.GroupTake(ctx, short, []string{"f"}); err != nil || n != 0 {
			t.Fatalf("take at the cap: %d (%v), want 0", n, err)
		}
		if _, err := s.GroupRenew(ctx, short, []string{"c", "d", "e"}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := s.GroupTake(ctx, g, []string{"f", "h", "i", "j"})
			if err != nil {
				t.Fatal(err)
			}
			if n == 3 {
				break
			}
			if n != 0 || time.Now().After(deadline) {
				t.Fatalf("take after the others' leases ended: %d slots, want 3 (0 before)", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		holders("f", "h", "i")
		if held, err := s.GroupRenew(ctx, g, []string{"c"}); err != nil || held[0] {
			t.Fatalf("renewal of a lapsed slot given to another: %v %v, want not held", held, err)
		}
	})
}

// plainPubSub reports whether rdb lacks sharded pub/sub (miniredis).
func plainPubSub(t *testing.T, rdb redis.UniversalClient) bool {
	t.Helper()
	err := rdb.Do(context.Background(), "SPUBLISH", "expset:probe", "").Err()
	return err != nil
}
