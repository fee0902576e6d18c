package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// TestStoreRescheduleNow: reschedule_now.lua takes a waiting job (nowJobs)
// out of its owner's set and payload hash and appends, field for field,
// the entry the sweeper writes for the job due at once; a job not waiting
// (taken, or never put) is not written; a call run twice writes one entry,
// its second run replying what the first did; a payload key of another
// type fails the call with nothing changed.
func TestStoreRescheduleNow(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, clock, _ := newClockedStore(t, rdb, 1_767_225_600_123)
		now := *clock
		for _, c := range sweptJobs(t, rdb, s) {
			what, sk := c.String(), c.sk
			if _, put, _, err := s.Put(ctx, c.owner, c.id, 3_600_000, c.payload, c.hasPayload); err != nil || !put {
				t.Fatalf("%s: Put: %v %v", what, put, err)
			}
			before := rdb.XLen(ctx, sk.Events).Val()
			call := s.rescheduleNowCall(c.owner, c.id)
			for i := range 2 { // the client sends it twice
				s.Run(ctx, call)
				if due, found, err := readReschedule(call.Reply); call.Err != nil || err != nil || !found || !due.Equal(now) {
					t.Fatalf("%s, run %d: %v %v %v %v, want %v found", what, i+1, due, found, err, call.Err, now)
				}
			}
			if got := lastEntry(t, rdb, sk.Events); !slices.Equal(got, c.swept) {
				t.Errorf("%s: reschedule_now.lua wrote %q, the sweeper %q", what, got, c.swept)
			}
			if n := rdb.XLen(ctx, sk.Events).Val() - before; n != 1 {
				t.Errorf("%s: %d entries written, want 1 (the call run twice)", what, n)
			}
			if rdb.ZScore(ctx, c.keys[0], c.id).Err() != redis.Nil || rdb.HExists(ctx, sk.Payload+c.bucket, c.id).Val() {
				t.Errorf("%s: the job or its payload still in its owner's keys", what)
			}
			if _, found, _, err := s.Reschedule(ctx, c.owner, c.id, 0); err != nil || found {
				t.Errorf("%s: Reschedule of a job taken: %v %v, want not found", what, found, err)
			}
		}

		// A payload key of another type: nothing changes.
		shard, owner, keys := s.jobKeys("", "wrongtype")
		sk := &s.shards[shard]
		if _, put, _, err := s.Put(ctx, "", "wrongtype", 3_600_000, nil, false); err != nil || !put {
			t.Fatalf("Put: %v %v", put, err)
		}
		rdb.Del(ctx, sk.Payload+owner)
		rdb.Set(ctx, sk.Payload+owner, "x", time.Minute)
		before := rdb.XLen(ctx, sk.Events).Val()
		if _, _, _, err := s.Reschedule(ctx, "", "wrongtype", 0); err == nil {
			t.Fatal("Reschedule with a payload key of another type: no error")
		}
		if rdb.ZScore(ctx, keys[0], "wrongtype").Err() != nil || rdb.XLen(ctx, sk.Events).Val() != before {
			t.Fatal("a failed Reschedule changed the job or the stream")
		}
	})
}
