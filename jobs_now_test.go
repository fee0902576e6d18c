package expset

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestJobPutNow: a job put with delay 0 is one stream entry and nothing
// else (no bucket, payload hash or due index key); Job reports it waiting,
// due at the put's now; Consume delivers it, with no sweeper anywhere,
// with an empty Owner, its ID and its payload; a second Put of the ID
// while a job of it waits (due in an hour) changes nothing.
func TestJobPutNow(t *testing.T) {
	eachJobSet(t, func(t *testing.T, b backend, s *Set, clk *fakeClock) {
		ctx := context.Background()
		t0 := clk.Now()
		due, put, err := s.Put(ctx, "a", 0, WithPayload([]byte("p-a")))
		if err != nil || !put || !due.Equal(t0) {
			t.Fatalf("Put: %v %v %v, want %v true", due, put, err, t0)
		}
		if left := jobKeysLeft(t, s); left != nil {
			t.Errorf("keys %q after a Put due at once, want none of buckets, payloads or the due index", left)
		}
		if n := streamLen(t, s); n != 1 {
			t.Fatalf("%d stream entries, want 1", n)
		}
		if j := must[Job](t)(s.Job(ctx, "a")); j != (Job{State: "waiting", Due: t0}) {
			t.Fatalf("Job(a): %+v, want waiting due %v", j, t0)
		}

		// Waiting in its bucket: a Put due at once changes nothing.
		later := must[time.Time](t)(putNew(ctx, s, "b", time.Hour))
		if d, put, err := s.Put(ctx, "b", 0, WithPayload([]byte("ignored"))); err != nil || put || !d.Equal(later) {
			t.Fatalf("Put(b, 0) with b waiting: %v %v %v, want %v false", d, put, err, later)
		}
		if n := streamLen(t, s); n != 1 {
			t.Fatalf("%d stream entries after a Put of a waiting job, want 1", n)
		}
		if j := must[Job](t)(s.Job(ctx, "b")); j != (Job{State: "waiting", Due: later}) {
			t.Fatalf("Job(b): %+v, want waiting due %v", j, later)
		}

		rec, stop := recordJobs(t, s, WithoutSweeper())
		waitFor(t, "a handled", func() bool { return rec.len() == 1 })
		waitFor(t, "a done", func() bool { return must[Job](t)(s.Job(ctx, "a")) == Job{} })
		stop()
		e := rec.events()[0]
		if e.Owner != "" || e.Member != "a" || string(e.Payload) != "p-a" || !e.Deadline.Equal(t0) || e.Attempt != 1 {
			t.Fatalf("handled %+v, want job a with its payload, due %v, attempt 1", e, t0)
		}
		if n := streamLen(t, s); n != 0 {
			t.Fatalf("%d stream entries once a is done, want 0", n)
		}
	})
}

// streamLen returns how many entries s's event streams hold.
func streamLen(t *testing.T, s *Set) int64 {
	t.Helper()
	var n int64
	for _, sk := range s.shards {
		n += must[int64](t)(s.rdb.XLen(context.Background(), sk.Events).Result())
	}
	return n
}

// TestJobPutNowEveryGroupAndOwner: a job due at once, of an owner or not,
// with a payload or an empty one or none, reaches every consumer group as
// the sweeper's event of it would: Owner, Member, Payload and Deadline;
// Cancel deletes one read into a consumer's batch and not begun.
func TestJobPutNowEveryGroupAndOwner(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("mail", "audit"))
		t0 := clk.Now()
		// Read into a consumer's batch of mail, not begun: cancelled.
		must[time.Time](t)(putNew(ctx, s, "gone", 0, WithOwner("v")))
		read := &redis.XReadGroupArgs{Group: "mail", Consumer: "c", Streams: []string{s.shards[s.st.ShardOf("v")].Events, ">"}, Count: 10, Block: -1}
		if n := len(must[[]redis.XStream](t)(s.rdb.XReadGroup(ctx, read).Result())[0].Messages); n != 1 {
			t.Fatalf("read %d events of v's shard, want job gone's", n)
		}
		if ok := must[bool](t)(s.Cancel(ctx, "gone", WithOwner("v"))); !ok {
			t.Fatal("Cancel of a job due at once, read, not begun: false")
		}
		if j := must[Job](t)(s.Job(ctx, "gone", WithOwner("v"))); j != (Job{}) {
			t.Fatalf("Job(gone) after Cancel: %+v, want unknown", j)
		}

		must[time.Time](t)(putNew(ctx, s, "plain", 0))
		must[time.Time](t)(putNew(ctx, s, "empty", 0, WithPayload(nil)))
		must[time.Time](t)(putNew(ctx, s, "owned", 0, WithOwner("u"), WithPayload([]byte("p-u"))))
		want := map[string]string{"/plain": "nil", "/empty": `""`, "u/owned": `"p-u"`}

		var mu sync.Mutex
		got := map[string]map[string]string{}
		handler := func(group string) func(context.Context, Expiry) error {
			return func(_ context.Context, e Expiry) error {
				p := "nil"
				if e.Payload != nil {
					p = `"` + string(e.Payload) + `"`
				}
				if !e.Deadline.Equal(t0) {
					p += " due " + e.Deadline.String()
				}
				mu.Lock()
				defer mu.Unlock()
				if got[group] == nil {
					got[group] = map[string]string{}
				}
				got[group][e.Owner+"/"+e.Member] = p
				return nil
			}
		}
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(got["mail"]) + len(got["audit"])
		}
		stopMail := consumeInBackground(t, s, "mail", "c", handler("mail"), WithoutSweeper())
		stopAudit := consumeInBackground(t, s, "audit", "c", handler("audit"), WithoutSweeper())
		waitFor(t, "each job handled in both groups", func() bool { return count() >= 2*len(want) })
		stopMail()
		stopAudit()
		mu.Lock()
		defer mu.Unlock()
		for _, g := range []string{"mail", "audit"} {
			if len(got[g]) != len(want) {
				t.Errorf("group %s handled %v, want %v", g, got[g], want)
			}
			for k, p := range want {
				if got[g][k] != p {
					t.Errorf("group %s: %s handled with payload %s, want %s", g, k, got[g][k], p)
				}
			}
		}
	})
}

// TestJobPutNowWakesTheConsumer: with a safety poll of a minute, a job put
// due at once while the consumer sleeps is handled: the put woke it.
func TestJobPutNowWakesTheConsumer(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(4), WithExpiryEvents(), WithConsumerGroups("g")))
		rec, stop := recordJobs(t, s, WithoutSweeper(), WithPollInterval(time.Minute))
		time.Sleep(200 * time.Millisecond) // the consumer asleep
		must[time.Time](t)(putNew(ctx, s, "j", 0))
		waitFor(t, "j handled", func() bool { return rec.len() == 1 })
		stop()
	})
}

// TestJobRescheduleNow: a waiting job rescheduled to now (delay 0) leaves
// its bucket with its payload and becomes its event at once: Consume
// delivers it, with no sweeper anywhere, with its payload and the new due
// time; Reschedule of it again finds no job waiting.
func TestJobRescheduleNow(t *testing.T) {
	eachJobSet(t, func(t *testing.T, b backend, s *Set, clk *fakeClock) {
		ctx := context.Background()
		if _, put, err := s.Put(ctx, "r", time.Hour, WithPayload([]byte("p-r"))); err != nil || !put {
			t.Fatalf("Put: %v %v", put, err)
		}
		clk.Advance(time.Minute)
		t1 := clk.Now()
		if due, err := s.Reschedule(ctx, "r", 0); err != nil || !due.Equal(t1) {
			t.Fatalf("Reschedule(r, 0): %v %v, want %v", due, err, t1)
		}
		if n := streamLen(t, s); n != 1 {
			t.Fatalf("%d stream entries, want 1", n)
		}
		if _, err := s.Reschedule(ctx, "r", 0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Reschedule of a job no longer waiting: %v, want ErrNotFound", err)
		}
		rec, stop := recordJobs(t, s, WithoutSweeper())
		waitFor(t, "r handled", func() bool { return rec.len() == 1 })
		stop()
		if e := rec.events()[0]; e.Member != "r" || string(e.Payload) != "p-r" || !e.Deadline.Equal(t1) || e.Attempt != 1 {
			t.Fatalf("handled %+v, want job r with its payload, due %v, attempt 1", e, t1)
		}
	})
}
