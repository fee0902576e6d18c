package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestStoreJobOwnersLeftOut: Counts counts the jobs due apart from the
// owners, NextDue lists no job owner, and JobDeadLetters keeps a job's
// dead letters alone, on every backend.
func TestStoreJobOwnersLeftOut(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, _ := newTestStore(t, rdb, 1)
		for _, id := range []string{"j1", "j2"} {
			if _, put, _, err := s.Put(ctx, "", id, 1, nil, false); err != nil || !put {
				t.Fatalf("Put %s: %v %v", id, put, err)
			}
		}
		if _, _, err := s.Add(ctx, "u", "m", 1, nil, false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		counts, err := s.Counts(ctx, time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if c := counts[0]; c.Owners != 1 || c.OwnersDue != 1 || c.MembersDue != 1 || c.JobsDue != 2 || c.EntriesDue < 2 {
			t.Fatalf("Counts: %+v; want owner u alone, its member and two jobs due", c)
		}
		due, err := s.NextDue(ctx, 10)
		if err != nil || len(due) != 1 || due[0].Owner != "u" {
			t.Fatalf("NextDue: %+v %v; want u alone", due, err)
		}

		shard, bucket := s.JobBucket("j1")
		dead := s.shards[shard].Dead
		for _, e := range [][]any{{"o", bucket, "m", "j1"}, {"o", bucket, "m", "j2"}, {"o", "u", "m", "j1"}, {"o", bucket, "m", "j1"}} {
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: dead, Values: append(e, "g", "g", "err", "x")})
		}
		got, msgs, err := s.JobDeadLetters(ctx, "", "j1")
		if err != nil || got != shard || len(msgs) != 2 {
			t.Fatalf("JobDeadLetters(j1): shard %d, %v, %v; want shard %d and j1's two", got, msgs, err, shard)
		}
		for _, m := range msgs {
			if m.Values["o"] != bucket || m.Values["m"] != "j1" {
				t.Errorf("JobDeadLetters(j1) returned %v", m.Values)
			}
		}
	})
}
