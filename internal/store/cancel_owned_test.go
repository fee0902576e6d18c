package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestStoreCancelOwnedJobRead: the event of a job of an owner, read by a
// consumer and cancelled before its begin, is begun by no fresh begin
// (with a cap or without) and no later one; the mark Cancel leaves goes
// with that begin, or with the consumer's release. The same holds for a
// job without an owner.
func TestStoreCancelOwnedJobRead(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newTestStore(t, rdb, 2)
		owner := ""
		for i := 0; owner == ""; i++ {
			if o := "u" + strconv.Itoa(i); s.ShardOf(o) == 0 {
				owner = o
			}
		}
		sk := s.Shards()[0]
		if err := s.CreateGroups(ctx, 0, []string{"g"}); err != nil {
			t.Fatal(err)
		}
		// read writes the event of job id of o, as the sweeper does, and
		// reads it for consumer c1.
		read := func(o, id string) string {
			t.Helper()
			eid, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk.Events, Values: []any{"o", o, "m", id, "d", "1000"}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			news := s.ReadNew(ctx, "g", "c1", []ShardRead{{Shard: 0, Count: 10}})
			if news[0].Err != nil || len(news[0].Entries) != 1 || news[0].Entries[0].ID != eid {
				t.Fatalf("ReadNew: %+v", news[0])
			}
			if ok, err := s.Cancel(ctx, owner, id); err != nil || !ok {
				t.Fatalf("Cancel(%s) of an event read, not begun: %v %v, want true", id, ok, err)
			}
			return eid
		}
		clean := func(what string) {
			t.Helper()
			if n, err := rdb.HLen(ctx, sk.Att).Result(); err != nil || n != 0 {
				t.Errorf("%s: %d attempts fields (%v), want none", what, n, err)
			}
			if n, err := rdb.HLen(ctx, sk.Runo).Result(); err != nil || n != 0 {
				t.Errorf("%s: %d slot counts (%v), want none", what, n, err)
			}
		}
		for _, c := range []Consumer{
			{Group: "g", Name: "c1", Lease: time.Minute, MaxAttempts: 2},
			{Group: "g", Name: "c1", Lease: time.Minute, MaxAttempts: 2, OwnerCap: 1},
		} {
			item := func(eid, tok string, fresh bool) BeginItem {
				it := BeginItem{ID: eid, Token: tok, Fresh: fresh}
				if c.OwnerCap > 0 {
					it.Owner = owner
				}
				return it
			}
			eid := read(owner, "fresh")
			if b := beginAll(t, s, c, item(eid, "t1", true)); b[0].Attempt != 0 {
				t.Fatalf("cap %d: fresh begin of a cancelled job's event: %+v, want nothing begun", c.OwnerCap, b)
			}
			clean("after the fresh begin")
			eid = read(owner, "later")
			if b := beginAll(t, s, c, item(eid, "t2", false)); b[0].Attempt != 0 {
				t.Fatalf("cap %d: begin of a cancelled job's event: %+v, want nothing begun", c.OwnerCap, b)
			}
			clean("after the begin")
			eid = read(owner, "released")
			if err := s.Release(ctx, c, 0, []string{eid}, Lease{}); err != nil {
				t.Fatal(err)
			}
			clean("after the release")
		}
		// A bucket's event: the same mark, and the fresh begin finds it.
		shard, bucket := s.JobBucket("ownerless")
		bk := s.Shards()[shard]
		if err := s.CreateGroups(ctx, shard, []string{"g"}); err != nil {
			t.Fatal(err)
		}
		beid, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: bk.Events, Values: []any{"o", bucket, "m", "ownerless", "d", "1000"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if news := s.ReadNew(ctx, "g", "c1", []ShardRead{{Shard: shard, Count: 10}}); news[0].Err != nil || len(news[0].Entries) != 1 {
			t.Fatalf("ReadNew: %+v", news[0])
		}
		if ok, err := s.Cancel(ctx, "", "ownerless"); err != nil || !ok {
			t.Fatalf("Cancel of a job without an owner, read: %v %v, want true", ok, err)
		}
		c := Consumer{Group: "g", Name: "c1", Lease: time.Minute, MaxAttempts: 2}
		call := s.BeginsCall(c, shard, []BeginItem{{ID: beid, Token: "t", Fresh: true}})
		s.RunPipelined(ctx, []*Call{call})
		if b, err := ReadBegins(call, 1); err != nil || b[0].Attempt != 0 {
			t.Fatalf("fresh begin of a cancelled job without an owner: %+v %v, want nothing begun", b, err)
		}
		if n, err := rdb.HLen(ctx, bk.Att).Result(); err != nil || n != 0 {
			t.Errorf("a job without an owner: %d attempts fields (%v), want none", n, err)
		}
	})
}
