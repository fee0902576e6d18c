package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestOwnerSlots follows an owner's slots (the shard's Runo fields)
// through every script that takes or frees one: a capped begin sent twice
// takes one; an acknowledgement (of one call, and of two in one script
// call), a retry, a burial, the release of a call given back, a claim by a
// consumer without the cap (the last call's lease lapsed) and the removal
// of the group each free it, and leave the attempts field without the
// owner.
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
		a2, a3 := begin("ta2"), begin("ta3")
		held(2, "two capped begins")
		call = s.AckCall(c, 0, []Lease{{a2, "ta2"}, {a3, "ta3"}})
		s.RunPipelined(ctx, []*Call{call})
		if ok, err := ReadAck(call, 2); err != nil || !ok[0] || !ok[1] {
			t.Fatalf("ack of two: %v %v", ok, err)
		}
		held(0, "both acknowledged in one call")

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
		time.Sleep(5 * time.Millisecond) // the call's lease, for plain's lease TTL, lapses
		if bs := beginAll(t, s, plain, BeginItem{ID: k, Token: "tq"}); bs[0].Attempt != 0 {
			t.Fatalf("begin of a lapsed capped call by a consumer without the cap: %+v, want none (left to a claim)", bs)
		}
		held(1, "a begin without the cap, before a claim")
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

// TestOwnerFirstAndMoreSlots follows an owner's two kinds of slot (its
// first, a field of its own, and the others, counted): a cap of 3 gives
// the first, then two counted ones (the last reported full), refuses a
// fourth; the first freed is taken again first; the counted ones freed
// leave nothing behind. A cap of 1 reports its only slot full. Every begin
// is sent twice and holds one slot; the second run of the one that took
// the last slot answers as its first.
func TestOwnerFirstAndMoreSlots(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newTestStore(t, rdb, 1)
		sk := s.Shards()[0]
		if err := s.CreateGroups(ctx, 0, []string{"g"}); err != nil {
			t.Fatal(err)
		}
		first, more := SlotFields("g", "u")
		state := func(wantFirst bool, wantMore int, what string) {
			t.Helper()
			f := rdb.HExists(ctx, sk.Runo, first).Val()
			m, err := rdb.HGet(ctx, sk.Runo, more).Int()
			if err == redis.Nil {
				m, err = 0, nil
			}
			if err != nil || f != wantFirst || m != wantMore {
				t.Fatalf("%s: first slot held %v, %d more (%v); want %v, %d", what, f, m, err, wantFirst, wantMore)
			}
		}
		// begin reads one new event of owner u for c and begins it with
		// token tok, the call sent twice.
		begin := func(c Consumer, tok string) (string, Begun) {
			t.Helper()
			id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.Events, Values: []any{"o", "u", "m", tok, "d", "1000"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			if news := s.ReadNew(ctx, "g", c.Name, []ShardRead{{Shard: 0, Count: 1}}); news[0].Err != nil || len(news[0].Entries) != 1 {
				t.Fatalf("ReadNew: %+v", news[0])
			}
			item := BeginItem{ID: id, Token: tok, Owner: "u", Fresh: true}
			b := beginAll(t, s, c, item)[0]
			if again := beginAll(t, s, c, item)[0]; b.Attempt > 0 && again.Attempt != b.Attempt {
				t.Fatalf("begin sent again: %+v, first %+v", again, b)
			}
			return id, b
		}
		ack := func(c Consumer, id, tok string) {
			t.Helper()
			call := s.AckCall(c, 0, []Lease{{id, tok}})
			s.RunPipelined(ctx, []*Call{call})
			if ok, err := ReadAck(call, 1); err != nil || !ok[0] {
				t.Fatalf("ack: %v %v", ok, err)
			}
		}

		c := Consumer{Group: "g", Name: "c", Lease: time.Minute, MaxAttempts: 1, OwnerCap: 3}
		a, ba := begin(c, "a")
		b, bb := begin(c, "b")
		d, bd := begin(c, "d")
		if ba.Attempt != 1 || ba.Full || bb.Attempt != 1 || bb.Full || bd.Attempt != 1 || !bd.Full {
			t.Fatalf("three begins: %+v %+v %+v, want attempt 1 each, the third full", ba, bb, bd)
		}
		state(true, 2, "three calls")
		if _, be := begin(c, "e"); be.Attempt != BeginFull {
			t.Fatalf("a fourth begin: %+v, want BeginFull", be)
		}
		state(true, 2, "a fourth refused")
		ack(c, a, "a")
		state(false, 2, "the first's call acknowledged")
		f, bf := begin(c, "f")
		if bf.Attempt != 1 {
			t.Fatalf("a begin with the first slot free: %+v", bf)
		}
		state(true, 2, "the first taken again")
		ack(c, b, "b")
		ack(c, d, "d")
		ack(c, f, "f")
		state(false, 0, "all acknowledged")
		if n := rdb.HLen(ctx, sk.Runo).Val(); n != 0 {
			t.Fatalf("%d slot fields left", n)
		}

		one := Consumer{Group: "g", Name: "one", Lease: time.Minute, MaxAttempts: 1, OwnerCap: 1}
		x, bx := begin(one, "x")
		if bx.Attempt != 1 || !bx.Full {
			t.Fatalf("a begin at cap 1: %+v, want attempt 1, full", bx)
		}
		ack(one, x, "x")
		state(false, 0, "cap 1 acknowledged")
	})
}
