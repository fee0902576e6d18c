package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestConsumerBuilders checks the KEYS and ARGV of the engine's builders,
// without and with owner slots.
func TestConsumerBuilders(t *testing.T) {
	t.Parallel()
	s := New(nil, "t", Options{Shards: 2})
	sk := s.Shards()[1]
	plain := Consumer{Group: "g", Name: "c", Lease: 1200 * time.Millisecond, MaxAttempts: 3}
	capped := plain
	capped.OwnerCap = 2
	check := func(what string, c *Call, op string, keys []string, args ...any) {
		t.Helper()
		same := slices.EqualFunc(c.Args, args, func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) })
		if c.Op != op || c.Shard != 1 || !slices.Equal(c.Keys, keys) || !same {
			t.Errorf("%s: %s %d %v %v, want %s 1 %v %v", what, c.Op, c.Shard, c.Keys, c.Args, op, keys, args)
		}
	}
	lease := []string{sk.Events, sk.Att, sk.Runo} // with a cap, and the scripts of the rarer paths
	hot := lease[:2]                              // begins, ack and renew without a cap
	items := []BeginItem{{ID: "1-0", Token: "a", Owner: "u", Fresh: true}, {ID: "2-0", Token: "b", Fresh: false}, {ID: "3-0", Token: "c", Fresh: true}}
	check("begins", s.BeginsCall(plain, 1, items), "begin", hot, "g", "c", 1200, 3, 200, 0, 1, "", "1-0", "a", "u", "2-0", "b", "", "3-0", "c", "")
	check("begins with a cap", s.BeginsCall(capped, 1, items), "begin", lease, "g", "c", 1200, 3, 200, 2, 1, "F:1:g", "1-0", "a", "u", "2-0", "b", "", "3-0", "c", "")
	check("begins, none fresh first", s.BeginsCall(plain, 1, items[1:]), "begin", hot, "g", "c", 1200, 3, 200, 0, 0, "", "2-0", "b", "", "3-0", "c", "")
	fresh := []BeginItem{items[0], items[2]}
	lean := s.BeginsCall(plain, 1, fresh)
	check("begins, every item fresh", lean, "begin", hot, "g", "1-0", "a", "3-0", "c")
	if lean.Script != scriptBeginFresh || lean.handover == nil || lean.handover().Script != scriptBegins {
		t.Errorf("begins, every item fresh: not begin_fresh.lua handing over to begins.lua")
	}
	check("begins, every item fresh, handed over", lean.handover(), "begin", hot, "g", "c", 1200, 3, 200, 0, 2, "", "1-0", "a", "u", "3-0", "c", "")
	check("begins with a cap, every item fresh", s.BeginsCall(capped, 1, fresh), "begin", lease, "g", "c", 1200, 3, 200, 2, 2, "F:1:g", "1-0", "a", "u", "3-0", "c", "")
	leases := []Lease{{"1-0", "a"}, {"2-0", ""}}
	check("ack", s.AckCall(plain, 1, leases), "ack", hot, "g", "1-0", "a", "2-0", "")
	check("ack with a cap", s.AckCall(capped, 1, leases), "ack", lease, "g", "1-0", "a", "2-0", "")
	check("renew", s.RenewCall(capped, 1, leases), "renew", lease, "g", "c", 1200, "1-0", "a", "2-0", "")
	check("retry", s.retryCall(plain, 1, Lease{"1-0", "a"}, 1500*time.Millisecond), "retry", lease, "g", "c", "1-0", 1500, 1200, "a")
	check("bury", s.buryCall(capped, BuryArgs{Shard: 1, Lease: Lease{"1-0", "a"}, Need: 3, Reason: "r"}), "bury",
		[]string{sk.Events, sk.Dead, sk.Att, sk.Runo}, "g", "c", "1-0", 3, "r", "a")
	check("release", s.releaseCall(plain, 1, []string{"1-0", "2-0"}, Lease{"1-0", "a"}), "release", lease, "g", "c", 1200, "1-0", "a", "1-0", "2-0")
	check("claim", s.claimCall(capped, ClaimArgs{Shard: 1, Cursor: "0-0", Count: 7, Reason: "r"}), "claim",
		[]string{sk.Events, sk.Dead, sk.Att, sk.Runo}, "g", "c", 1200, "0-0", 7, 3, "r")
	check("prune", s.pruneCall("g", 1, 2500*time.Millisecond, ""), "prune", []string{sk.Events}, "g", "2500", "")
	check("prune, leaving", s.pruneCall("g", 1, -1, "c"), "prune", []string{sk.Events}, "g", "", "c")
	if c := s.RenewCall(Consumer{Group: "g", Name: "c"}, 1, nil); c.Args[2] != int64(1) {
		t.Errorf("renew with a lease under 1ms sends %v, want 1", c.Args[2])
	}
}

// TestConsumerReadersRead checks well-formed replies of the engine's
// scripts.
func TestConsumerReadersRead(t *testing.T) {
	t.Parallel()
	bs, err := ReadBegins(&Call{Reply: []any{int64(2*4 + 2 + 1), int64(0), int64(BeginFull), int64(1 * 4)}}, 4)
	want := []Begun{{Attempt: 2, Taken: true, Full: true}, {}, {Attempt: BeginFull}, {Attempt: 1}}
	if err != nil || !slices.Equal(bs, want) {
		t.Errorf("begins: %+v %v, want %+v", bs, err, want)
	}
	if bs, err := ReadBegins(&Call{Script: scriptBeginFresh, Reply: int64(4)}, 1); err != nil || !slices.Equal(bs, []Begun{{Attempt: 1}}) {
		t.Errorf("begin_fresh.lua, one item: %+v %v, want attempt 1", bs, err)
	}
	held, err := ReadAck(&Call{Reply: []any{int64(1), int64(0), "x"}}, 3)
	if err != nil || !slices.Equal(held, []bool{true, false, false}) {
		t.Errorf("ack: %v %v", held, err)
	}
	if _, err := ReadRenew(&Call{Err: errReply}, 1); !errors.Is(err, errReply) {
		t.Errorf("renew of a call that failed: %v", err)
	}
	cl, err := readClaim([]any{"5-0", []any{"1-0", int64(2), int64(1), []any{"o", "u"}}, []any{"2-0", int64(0), int64(0), []any{}}})
	if err != nil || cl.Malformed != nil || cl.Cursor != "5-0" || len(cl.Entries) != 2 || !cl.Entries[0].Buried || cl.Entries[0].Used != 2 || cl.Entries[0].Values["o"] != "u" {
		t.Errorf("claim: %+v %v", cl, err)
	}
	cl, err = readClaim([]any{"5-0", []any{"1-0", int64(2), int64(1), []any{}}, "x"})
	if err != nil || !errors.Is(cl.Malformed, ErrUnexpectedReply) || len(cl.Entries) != 1 {
		t.Errorf("claim with a malformed entry: %+v %v, want the cursor and the entries before it", cl, err)
	}
}

// TestConsumerFlagReaders feeds every shape to the readers of a 1 or 0
// (retry.lua, bury.lua): only 1 (or "1") is yes, and none panics.
func TestConsumerFlagReaders(t *testing.T) {
	t.Parallel()
	for _, v := range shapes {
		want := v == int64(1) || v == "1"
		if got := readRetry(v); got != want {
			t.Errorf("retry.lua on %#v: %v, want %v", v, got, want)
		}
		if got := readBury(v); got != want {
			t.Errorf("bury.lua on %#v: %v, want %v", v, got, want)
		}
	}
}
