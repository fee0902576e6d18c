package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestOwnerSlots follows an owner's slot count (the shard's Runo field)
// through every script that takes or frees one: a capped begin sent twice
// takes one; an acknowledgement, a retry, a burial, the release of a call
// given back, a claim by a consumer without the cap (the last call's lease
// lapsed) and the removal of the group each free it, and leave the
// attempts field without the owner.
func TestOwnerSlots(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newTestStore(t, rdb, 1)
		sk := s.Shards()[0]
		add := func() string {
			t.Helper()
			id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.Events, Values: []any{"o", "u", "m", "x", "d", "1000"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		if err := s.CreateGroups(ctx, 0, []string{"g"}); err != nil {
			t.Fatal(err)
		}
		c := Consumer{Group: "g", Name: "c", Lease: time.Minute, MaxAttempts: 1, OwnerCap: 3}
		held := func(want int, what string) {
			t.Helper()
			first, more := SlotFields("g", "u")
			f, err := rdb.HExists(ctx, sk.Runo, first).Result()
			n, err2 := rdb.HGet(ctx, sk.Runo, more).Int()
			if err2 != redis.Nil && err == nil {
				err = err2
			}
			if f {
				n++
			}
			if err != nil || n != want {
				t.Fatalf("%s: owner u holds %d slots (%v), want %d", what, n, err, want)
			}
		}
		// begin reads one new event for c and begins it (fresh) with token tok.
		begin := func(tok string) string {
			t.Helper()
			id := add()
			if news := s.ReadNew(ctx, "g", "c", []ShardRead{{Shard: 0, Count: 1}}); news[0].Err != nil || len(news[0].Entries) != 1 {
				t.Fatalf("ReadNew: %+v", news[0])
			}
			item := BeginItem{ID: id, Token: tok, Owner: "u", Fresh: true}
			for range 2 { // the client sends it twice
				if b := beginAll(t, s, c, item); b[0].Attempt != 1 {
					t.Fatalf("begin: %+v, want attempt 1", b)
				}
			}
			return id
		}

		a := begin("ta")
		held(1, "a capped begin sent twice")
		call := s.AckCall(c, 0, []Lease{{a, "ta"}})
		s.RunPipelined(ctx, []*Call{call})
		if ok, err := ReadAck(call, 1); err != nil || !ok[0] {
			t.Fatalf("ack: %v %v", ok, err)
		}
		held(0, "acknowledged")

		r := begin("tr")
		if ok, err := s.Retry(ctx, c, 0, Lease{r, "tr"}, time.Hour); err != nil || !ok {
			t.Fatalf("Retry: %v %v", ok, err)
		}
		held(0, "retried")
		if v := rdb.HGet(ctx, sk.Att, r+" g").Val(); v == "" || v[len(v)-1] == 'u' {
			t.Fatalf("attempts field of a retried call: %q, want no owner", v)
		}

		b := begin("tb")
		if ok, err := s.Bury(ctx, c, BuryArgs{Shard: 0, Lease: Lease{b, "tb"}, Need: 1, Reason: "r"}); err != nil || !ok {
			t.Fatalf("Bury: %v %v", ok, err)
		}
		held(0, "buried")

		g := begin("tg")
		if err := s.Release(ctx, c, 0, []string{g}, Lease{g, "tg"}); err != nil {
			t.Fatalf("Release: %v", err)
		}
		held(0, "given back")

		k := begin("tk")
		held(1, "begun")
		plain := Consumer{Group: "g", Name: "p", Lease: time.Millisecond, MaxAttempts: 5}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			cl, err := s.Claim(ctx, plain, ClaimArgs{Shard: 0, Cursor: "0-0", Count: 10, Reason: "r"})
			if err != nil {
				t.Fatalf("Claim: %v", err)
			}
			if slices.ContainsFunc(cl.Entries, func(e ClaimedEntry) bool { return e.ID == k }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the lapsed call not claimed: %+v", cl)
			}
		}
		held(0, "claimed by a consumer without the cap")
		if bs := beginAll(t, s, plain, BeginItem{ID: k, Token: "tp"}); bs[0].Attempt != 2 {
			t.Fatalf("begin of the claim: %+v, want attempt 2", bs)
		}
		held(0, "begun by a consumer without the cap")

		begin("tx")
		held(1, "begun")
		if _, _, err := s.RemoveGroup(ctx, "g"); err != nil {
			t.Fatalf("RemoveGroup: %v", err)
		}
		held(0, "the group removed")
	})
}
