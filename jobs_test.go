package expset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestJobsSpreadOverShards: 400 jobs land on every one of 8 shards, in
// several buckets each, and none on one owner's key alone.
func TestJobsSpreadOverShards(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(8), WithExpiryEvents())
		concurrently(t, 400, func(i int) error {
			if _, put, err := s.Put(ctx, fmt.Sprintf("job-%d", i), time.Hour); err != nil || !put {
				return fmt.Errorf("Put job-%d: %v %v", i, put, err)
			}
			return nil
		})
		perShard := map[int]int64{}
		buckets := 0
		keys := setKeys(t, b.rdb, s.name)
		for i, sk := range s.shards {
			for _, k := range keys {
				if strings.HasPrefix(k, sk.Owner+jobOwnerPrefix) {
					perShard[i] += b.rdb.ZCard(ctx, k).Val()
					buckets++
				}
			}
		}
		total := int64(0)
		for i := range s.shards {
			if perShard[i] == 0 {
				t.Errorf("shard %d holds no job: %v", i, perShard)
			}
			total += perShard[i]
		}
		if total != 400 || buckets < 16 {
			t.Fatalf("%d jobs in %d buckets, want 400 over more than 16 buckets", total, buckets)
		}
	})
}

// TestJobPutIfAbsent: a second Put of a waiting job changes nothing, not
// its due time, not its payload, also once it is due and not yet swept;
// after delivery the ID may be put again.
func TestJobPutIfAbsent(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage())
		due, put, err := s.Put(ctx, "a", time.Minute, WithPayload([]byte("first")))
		if err != nil || !put || !due.Equal(clk.Now().Add(time.Minute)) {
			t.Fatalf("Put: %v %v %v", due, put, err)
		}
		again, put, err := s.Put(ctx, "a", time.Second, WithPayload([]byte("second")))
		if err != nil || put || !again.Equal(due) {
			t.Fatalf("second Put: %v %v %v, want %v false", again, put, err, due)
		}
		clk.Advance(time.Minute)
		if again, put, _ := s.Put(ctx, "a", time.Second); put || !again.Equal(due) {
			t.Fatalf("Put of a due job not yet swept: %v %v, want %v false", again, put, due)
		}
		if j := must[Job](t)(s.Job(ctx, "a")); j.State != "waiting" || !j.Due.Equal(due) {
			t.Fatalf("Job: %+v", j)
		}
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		evs := readAll(t, s)
		if len(evs) != 1 || evs[0].Owner != "" || evs[0].Member != "a" || string(evs[0].Payload) != "first" || !evs[0].Deadline.Equal(due) {
			t.Fatalf("events %+v, want job a once with its first payload", evs)
		}
		if _, put, err := s.Put(ctx, "a", time.Second); err != nil || !put {
			t.Fatalf("Put after the sweep: %v %v, want a new job", put, err)
		}
	})
}

// readAll returns every event of s's streams.
func readAll(t *testing.T, s *Set) []Expiry {
	t.Helper()
	var out []Expiry
	for i := range s.shards {
		evs, _, err := s.ReadEvents(context.Background(), i, "0", maxBatch, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
	}
	return out
}

// TestJobRescheduleAndCancel: a job moved later is not delivered at its old
// time, one moved earlier is delivered at its new one, a cancelled job is
// never delivered, and Reschedule of a job not waiting finds nothing.
func TestJobRescheduleAndCancel(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents())
		t0 := clk.Now()
		for _, id := range []string{"later", "earlier", "cancelled"} {
			must[time.Time](t)(func() (time.Time, error) { d, _, err := s.Put(ctx, id, time.Minute); return d, err }())
		}
		if d := must[time.Time](t)(s.Reschedule(ctx, "later", time.Hour)); !d.Equal(t0.Add(time.Hour)) {
			t.Fatalf("Reschedule later: %v", d)
		}
		if d := must[time.Time](t)(s.Reschedule(ctx, "earlier", time.Second)); !d.Equal(t0.Add(time.Second)) {
			t.Fatalf("Reschedule earlier: %v", d)
		}
		if ok := must[bool](t)(s.Cancel(ctx, "cancelled")); !ok {
			t.Fatal("Cancel of a waiting job: false")
		}
		// The due index holds each bucket at or before its earliest job.
		shard, owner := s.st.JobBucket("earlier")
		keys := []string{s.shards[shard].OwnerKey(owner)}
		if sc, err := b.rdb.ZScore(ctx, s.shards[shard].Due, owner).Result(); err != nil || sc > float64(t0.Add(time.Second).UnixMilli()) {
			t.Fatalf("due index %s: %s at %v (%v), after the job's new due time", s.shards[shard].Due, keys[0], sc, err)
		}
		w := newSweeper(t, s)
		clk.Advance(time.Second)
		must[SweepStats](t)(w.SweepOnce(ctx))
		if evs := readAll(t, s); len(evs) != 1 || evs[0].Member != "earlier" {
			t.Fatalf("after 1s: %+v, want earlier alone", evs)
		}
		clk.Advance(time.Minute)
		must[SweepStats](t)(w.SweepOnce(ctx))
		if evs := readAll(t, s); len(evs) != 1 {
			t.Fatalf("after the old due time: %+v, want earlier alone", evs)
		}
		if j := must[Job](t)(s.Job(ctx, "later")); j.State != "waiting" || !j.Due.Equal(t0.Add(time.Hour)) {
			t.Fatalf("Job later: %+v", j)
		}
		for _, id := range []string{"cancelled", "earlier", "never"} {
			if _, err := s.Reschedule(ctx, id, time.Second); !errors.Is(err, ErrNotFound) {
				t.Errorf("Reschedule %s: %v, want ErrNotFound", id, err)
			}
			// earlier's event is written, read by no group: cancelled.
			if ok, err := s.Cancel(ctx, id); ok != (id == "earlier") || err != nil {
				t.Errorf("Cancel %s: %v %v", id, ok, err)
			}
		}
		if j := must[Job](t)(s.Job(ctx, "cancelled")); j != (Job{}) {
			t.Fatalf("Job cancelled: %+v, want unknown", j)
		}
		clk.Advance(time.Hour)
		must[SweepStats](t)(w.SweepOnce(ctx))
		if evs := readAll(t, s); len(evs) != 1 || evs[0].Member != "later" {
			t.Fatalf("after an hour: %+v, want later alone", evs)
		}
	})
}

// TestJobRescheduledEarlierWakesTheSweeper: with a safety poll of a minute,
// a job put an hour ahead and moved to 50ms is handled at once: the move
// woke the sleeping sweeper.
func TestJobRescheduledEarlierWakesTheSweeper(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(4), WithExpiryEvents()))
		got := deliveries(t, s, WithPollInterval(time.Minute))
		if _, _, err := s.Put(ctx, "j", time.Hour); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // both loops asleep
		must[time.Time](t)(s.Reschedule(ctx, "j", 50*time.Millisecond))
		waitFor(t, "j handled", func() bool { return got()["j"] })
	})
}

// TestJobLifecycle: a job's state from put to done, running with its
// attempt and dead after its last; every consumer group gets each job, with
// an empty Owner, its ID and its payload.
func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("mail", "audit"))
		for _, id := range []string{"ok", "fails"} {
			if _, _, err := s.Put(ctx, id, time.Second, WithPayload([]byte("p-"+id))); err != nil {
				t.Fatal(err)
			}
		}
		due := clk.Now().Add(time.Second)
		if j := must[Job](t)(s.Job(ctx, "ok")); j != (Job{State: "waiting", Due: due}) {
			t.Fatalf("put: %+v", j)
		}
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		if j := must[Job](t)(s.Job(ctx, "ok")); j != (Job{State: "waiting", Due: due}) {
			t.Fatalf("swept, not read: %+v", j)
		}
		var mu sync.Mutex
		seen := map[string][]Expiry{}
		inCall := map[string]Job{}
		handler := func(group string) func(context.Context, Expiry) error {
			return func(_ context.Context, e Expiry) error {
				j, err := s.Job(ctx, e.Member)
				mu.Lock()
				seen[group] = append(seen[group], e)
				if group == "mail" {
					inCall[e.Member] = j
				}
				mu.Unlock()
				if err != nil {
					return err
				}
				if group == "mail" && e.Member == "fails" {
					return errors.New("no such address")
				}
				return nil
			}
		}
		opts := []ConsumeOption{WithMaxAttempts(2), WithLeaseTTL(50 * time.Millisecond), WithPollInterval(5 * time.Millisecond)}
		stopAudit := consumeInBackground(t, s, "audit", "a", handler("audit"), opts...)
		waitFor(t, "audit done", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen["audit"]) == 2 })
		stopAudit()
		stopMail := consumeInBackground(t, s, "mail", "m", handler("mail"), opts...)
		waitFor(t, "fails dead", func() bool { return must[Job](t)(s.Job(ctx, "fails")).State == "dead" })
		waitFor(t, "ok done", func() bool { return must[Job](t)(s.Job(ctx, "ok")) == Job{} })
		stopMail()
		mu.Lock()
		defer mu.Unlock()
		if j := inCall["ok"]; j != (Job{State: "running", Due: due, Attempt: 1}) {
			t.Errorf("ok during its call: %+v", j)
		}
		if j := inCall["fails"]; j != (Job{State: "running", Due: due, Attempt: 2}) {
			t.Errorf("fails during its last call: %+v", j)
		}
		for _, g := range []string{"mail", "audit"} {
			for _, e := range seen[g] {
				if e.Owner != "" || string(e.Payload) != "p-"+e.Member || !e.Deadline.Equal(due) {
					t.Errorf("%s got %+v, want an ownerless job with its payload", g, e)
				}
			}
		}
		if j := must[Job](t)(s.Job(ctx, "fails")); j != (Job{State: "dead", Due: due}) {
			t.Errorf("fails: %+v", j)
		}
	})
}

// TestJobOwnerPrefixRefused: no owner can pass for a bucket of jobs.
func TestJobOwnerPrefixRefused(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newTestSet(t, b, WithExpiryEvents())
		if _, err := s.Add(context.Background(), jobOwnerPrefix+"0", "m", time.Minute); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Add to a bucket's owner: %v, want ErrInvalidArgument", err)
		}
	})
}
