package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestStoreConsumerScripts runs the consumer engine's reads and scripts on
// every backend: read, begin, renew, acknowledge, retry, claim, bury,
// release, prune and take.
func TestStoreConsumerScripts(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, ops := newTestStore(t, rdb, 2)
		add := func(owner, member string) string {
			t.Helper()
			id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: s.Shards()[0].Events, Values: []any{"o", owner, "m", member, "d", "1000"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		a, b := add("u", "a"), add("u", "b")
		if err := s.CreateGroups(ctx, 0, []string{"g"}); err != nil {
			t.Fatal(err)
		}
		c1 := Consumer{Group: "g", Name: "c1", Lease: time.Minute, MaxAttempts: 2}
		c2 := Consumer{Group: "g", Name: "c2", Lease: time.Minute, MaxAttempts: 2}
		news := s.ReadNew(ctx, "g", "c1", []ShardRead{{Shard: 0, Count: 10, Pending: true}, {Shard: 1, Count: 10}})
		if news[0].Err != nil || len(news[0].Entries) != 2 || news[0].Entries[0].ID != a || news[0].Pending != 2 {
			t.Fatalf("ReadNew: %+v", news[0])
		}
		if !IsNoGroup(news[1].Err) {
			t.Fatalf("ReadNew of a shard without a stream: %v, want NOGROUP", news[1].Err)
		}
		begun := beginAll(t, s, c1, BeginItem{ID: a, Token: "ta", Fresh: true}, BeginItem{ID: b, Token: "tb", Fresh: true})
		if begun[0].Attempt != 1 || begun[0].Taken || begun[1].Attempt != 1 {
			t.Fatalf("begins: %+v, want attempt 1 each, the read's lease running on", begun)
		}
		if held, err := s.Renew(ctx, c1, 0, Lease{a, "ta"}); err != nil || !held {
			t.Fatalf("Renew: %v %v", held, err)
		}
		if held, err := s.Renew(ctx, c1, 0, Lease{a, "other"}); err != nil || held {
			t.Fatalf("Renew of another call's lease: %v %v", held, err)
		}
		for _, want := range []bool{true, false} {
			call := s.AckCall(c1, 0, []Lease{{a, "ta"}})
			s.RunPipelined(ctx, []*Call{call})
			if held, err := ReadAck(call, 1); err != nil || held[0] != want {
				t.Fatalf("ack: %v %v, want %v", held, err, want)
			}
		}
		if ok, err := s.Retry(ctx, c1, 0, Lease{b, "tb"}, 0); err != nil || !ok {
			t.Fatalf("Retry: %v %v", ok, err)
		}
		if n, err := s.Retrying(ctx, []GroupShard{{"g", 0}}); err != nil || !slices.Equal(n, []int64{1}) {
			t.Fatalf("Retrying: %v %v", n, err)
		}
		cl, err := s.Claim(ctx, c2, ClaimArgs{Shard: 0, Cursor: "0-0", Count: 10, Reason: "r"})
		if err != nil || cl.Malformed != nil || cl.Cursor != "0-0" || len(cl.Entries) != 1 || cl.Entries[0].ID != b || cl.Entries[0].Used != 1 || cl.Entries[0].Values["m"] != "b" {
			t.Fatalf("Claim: %+v %v", cl, err)
		}
		if begun = beginAll(t, s, c1, BeginItem{ID: b, Token: "tb1"}); begun[0].Attempt != 0 {
			t.Fatalf("begin of an event another consumer claimed: %+v, want attempt 0", begun)
		}
		if begun = beginAll(t, s, c2, BeginItem{ID: b, Token: "tb2"}); begun[0].Attempt != 2 || begun[0].Taken {
			t.Fatalf("begin of a claim: %+v, want attempt 2, the claim's lease running on", begun)
		}
		if buried, err := s.Bury(ctx, c2, BuryArgs{Shard: 0, Lease: Lease{b, "tb2"}, Need: 2, Reason: "r"}); err != nil || !buried {
			t.Fatalf("Bury: %v %v", buried, err)
		}
		if n, err := rdb.XLen(ctx, s.Shards()[0].Dead).Result(); err != nil || n != 1 {
			t.Fatalf("dead letters: %d %v", n, err)
		}
		checkRelease(t, s, c1, c2, add("u", "c"))
		if err := s.Prune(ctx, "g", 0, -1, "c1"); err != nil {
			t.Fatalf("Prune: %v", err)
		}
		if err := s.Leave(ctx, "g", "c2", []int{0}); err != nil {
			t.Fatalf("Leave: %v", err)
		}
		checkCapped(t, s, add("v", "d"), add("v", "e"))
		want := []string{"begin", "renew", "renew", "ack", "ack", "retry", "claim", "begin", "begin", "bury", "release", "claim", "prune", "prune", "begin", "ack", "begin"}
		if got := ops(); !slices.Equal(got, want) {
			t.Fatalf("OnCall saw %v, want %v", got, want)
		}
	})
}

// beginAll begins items on shard 0 for c, in one begins.lua call.
func beginAll(t *testing.T, s *Store, c Consumer, items ...BeginItem) []Begun {
	t.Helper()
	call := s.BeginsCall(c, 0, items)
	s.RunPipelined(context.Background(), []*Call{call})
	begun, err := ReadBegins(call, len(items))
	if err != nil {
		t.Fatalf("begins: %v", err)
	}
	for _, b := range begun {
		if b.Err != nil {
			t.Fatalf("begins: %v", b.Err)
		}
	}
	return begun
}

// checkRelease reads event id for c1, releases it, and claims it for c2
// at once: a release makes it idle a lease TTL.
func checkRelease(t *testing.T, s *Store, c1, c2 Consumer, id string) {
	t.Helper()
	ctx := context.Background()
	news := s.ReadNew(ctx, "g", "c1", []ShardRead{{Shard: 0, Count: 10}})
	if news[0].Err != nil || len(news[0].Entries) != 1 || news[0].Entries[0].ID != id {
		t.Fatalf("ReadNew: %+v", news[0])
	}
	if err := s.Release(ctx, c1, 0, []string{id}, Lease{}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	cl, err := s.Claim(ctx, c2, ClaimArgs{Shard: 0, Cursor: "0-0", Count: 10, Reason: "r"})
	if err != nil || len(cl.Entries) != 1 || cl.Entries[0].ID != id || cl.Entries[0].Used != 0 {
		t.Fatalf("Claim of an event released: %+v %v", cl, err)
	}
}

// checkCapped begins two events d and e of one owner, read at once, with a
// cap of 1: the first is begun and fills its owner's slots, the second is
// refused; the first's acknowledgement frees the slot.
func checkCapped(t *testing.T, s *Store, d, e string) {
	t.Helper()
	ctx := context.Background()
	c := Consumer{Group: "g", Name: "c3", Lease: time.Minute, MaxAttempts: 2, OwnerCap: 1}
	news := s.ReadNew(ctx, "g", "c3", []ShardRead{{Shard: 0, Count: 10}})
	if news[0].Err != nil || len(news[0].Entries) != 2 {
		t.Fatalf("ReadNew: %+v", news[0])
	}
	begun := beginAll(t, s, c, BeginItem{ID: d, Token: "t1", Owner: "v", Fresh: true}, BeginItem{ID: e, Token: "t2", Owner: "v", Fresh: true})
	if begun[0].Attempt != 1 || !begun[0].Full || begun[1].Attempt != BeginFull {
		t.Fatalf("begins with a cap of 1: %+v, want the first begun, its owner full, the second refused", begun)
	}
	ack := s.AckCall(c, 0, []Lease{{d, "t1"}})
	s.RunPipelined(ctx, []*Call{ack})
	if held, err := ReadAck(ack, 1); err != nil || !held[0] {
		t.Fatalf("ack: %v %v", held, err)
	}
	if begun := beginAll(t, s, c, BeginItem{ID: e, Token: "t3", Owner: "v"}); begun[0].Attempt != 1 {
		t.Fatalf("begin once the slot is free: %+v, want attempt 1", begun)
	}
}
