package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestBeginFresh runs begin_fresh.lua on every backend: a fresh item is
// begun (attempt 1, the read's lease running on) once however often the
// begin is sent; an entry acknowledged after the read, with Set.Cancel's
// mark, is not begun and its mark goes; while the group or an owner in it
// is paused, the call hands over to begins.lua, which refuses what it
// must and begins the rest.
func TestBeginFresh(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, ops := newTestStore(t, rdb, 1)
		sk := s.Shards()[0]
		add := func(owner string) string {
			t.Helper()
			id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.Events, Values: []any{"o", owner, "m", "m", "d", "1000"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		a, b, c, d := add("u"), add("u"), add("v"), add("w")
		if err := s.CreateGroups(ctx, 0, []string{"g"}); err != nil {
			t.Fatal(err)
		}
		if news := s.ReadNew(ctx, "g", "c", []ShardRead{{Shard: 0, Count: 10}}); news[0].Err != nil || len(news[0].Entries) != 4 {
			t.Fatalf("ReadNew: %+v", news[0])
		}
		con := Consumer{Group: "g", Name: "c", Lease: time.Minute, MaxAttempts: 3}
		field := func(id string) string {
			t.Helper()
			v, err := rdb.HGet(ctx, sk.Att, att(id, "g")).Result()
			if err == redis.Nil {
				return ""
			}
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		begin := func(what string, want []Begun, items ...BeginItem) {
			t.Helper()
			call := s.BeginsCall(con, 0, items)
			if call.Script != scriptBeginFresh {
				t.Fatalf("%s: not begin_fresh.lua's call", what)
			}
			s.RunPipelined(ctx, []*Call{call})
			got, err := ReadBegins(call, len(items))
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s: %+v %v, want %+v", what, got, err, want)
			}
		}
		one := Begun{Attempt: 1}
		for range 2 {
			begin("a fresh item, sent twice", []Begun{one}, BeginItem{ID: a, Token: "ta", Owner: "u", Fresh: true})
		}
		if v := field(a); v != "1 ta" {
			t.Fatalf("attempts field of a begun item: %q, want \"1 ta\"", v)
		}
		// b acknowledged after the read, with Set.Cancel's mark.
		if err := rdb.XAck(ctx, sk.Events, "g", b).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, sk.Att, att(b, "g"), "0 -").Err(); err != nil {
			t.Fatal(err)
		}
		begin("an entry acknowledged, with its mark", []Begun{{}}, BeginItem{ID: b, Token: "tb", Owner: "u", Fresh: true})
		if v := field(b); v != "" {
			t.Fatalf("attempts field of an entry acknowledged: %q, want none", v)
		}
		if _, err := s.Pause(ctx, []int{0}, "g", "v", true); err != nil {
			t.Fatal(err)
		}
		begin("an owner paused", []Begun{{Attempt: BeginOwnerPaused}, one},
			BeginItem{ID: c, Token: "tc", Owner: "v", Fresh: true}, BeginItem{ID: d, Token: "td", Owner: "w", Fresh: true})
		if _, err := s.Pause(ctx, []int{0}, "g", "", true); err != nil {
			t.Fatal(err)
		}
		begin("the group paused", []Begun{{Attempt: BeginPaused}}, BeginItem{ID: c, Token: "tc", Owner: "v", Fresh: true})
		if v := field(c); v != "" {
			t.Fatalf("attempts field of an item refused: %q, want none", v)
		}
		want := []string{"begin", "begin", "begin", "pause", "begin", "begin", "pause", "begin", "begin"}
		if got := ops(); !slices.Equal(got, want) {
			t.Fatalf("OnCall saw %v, want %v (a call handed over seen twice)", got, want)
		}
	})
}

// att is the attempts field of entry id in group.
func att(id, group string) string { return id + " " + group }
