package expset

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// TestJobCancelDue: a job due and not yet swept is cancelled with its
// payload, and the sweeper then writes no event of it.
func TestJobCancelDue(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("a"))
		for _, id := range []string{"due", "other"} {
			if _, put, err := s.Put(ctx, id, time.Second, WithPayload([]byte("p-"+id))); err != nil || !put {
				t.Fatalf("Put %s: %v %v", id, put, err)
			}
		}
		clk.Advance(2 * time.Second)
		if ok := must[bool](t)(s.Cancel(ctx, "due")); !ok {
			t.Fatal("Cancel of a due job not swept: false")
		}
		if j := must[Job](t)(s.Job(ctx, "due")); j != (Job{}) {
			t.Fatalf("Job after Cancel: %+v, want unknown", j)
		}
		shard, owner := s.st.JobBucket("due")
		if n := b.rdb.HExists(ctx, s.shards[shard].Payload+owner, "due").Val(); n {
			t.Fatal("the cancelled job's payload is left")
		}
		st := must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		evs := readAll(t, s)
		if st.Expired != 1 || len(evs) != 1 || evs[0].Member != "other" || string(evs[0].Payload) != "p-other" {
			t.Fatalf("swept %+v, events %+v: want other alone", st, evs)
		}
		if ok := must[bool](t)(s.Cancel(ctx, "due")); ok {
			t.Fatal("second Cancel: true")
		}
	})
}

// TestJobCancelLeavesTheIndexEntry: cancelling a bucket's last job leaves
// the bucket's entry in the due index; the sweeper, when it comes due,
// takes it out as stale and writes no event.
func TestJobCancelLeavesTheIndexEntry(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage())
		if _, put, err := s.Put(ctx, "gone", time.Second, WithPayload([]byte("p"))); err != nil || !put {
			t.Fatalf("Put: %v %v", put, err)
		}
		if ok := must[bool](t)(s.Cancel(ctx, "gone")); !ok {
			t.Fatal("Cancel of a waiting job: false")
		}
		shard, owner := s.st.JobBucket("gone")
		due := s.shards[shard].Due
		if _, err := b.rdb.ZScore(ctx, due, owner).Result(); err != nil {
			t.Fatalf("the bucket's index entry after Cancel: %v, want it left for the sweeper", err)
		}
		clk.Advance(2 * time.Second)
		st := must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		if st.Expired != 0 || st.Stale != 1 || len(readAll(t, s)) != 0 {
			t.Fatalf("swept %+v: want one stale entry and no event", st)
		}
		if n := indexLen(t, b.rdb, due); n != 0 {
			t.Fatalf("the due index holds %d owners after the sweep, want none", n)
		}
	})
}

// TestJobCancelSwept: a job whose event is written is cancelled while no
// group has begun a call of it (not read, or read into a consumer's batch:
// then acknowledged, so that no begin finds it), and not once a group has
// begun one, finished or not; Job follows.
func TestJobCancelSwept(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithConsumerGroups("a", "b"))
		sk := &s.shards[0]
		w := newSweeper(t, s)
		put := func(id string) time.Time {
			t.Helper()
			due, ok, err := s.Put(ctx, id, time.Second)
			if err != nil || !ok {
				t.Fatalf("Put %s: %v %v", id, ok, err)
			}
			clk.Advance(time.Second)
			if st := must[SweepStats](t)(w.SweepOnce(ctx)); st.Expired != 1 {
				t.Fatalf("sweep of %s: %+v", id, st)
			}
			return due
		}
		cancel := func(id string, want bool) {
			t.Helper()
			if ok := must[bool](t)(s.Cancel(ctx, id)); ok != want {
				t.Fatalf("Cancel %s: %v, want %v", id, ok, want)
			}
		}

		// Not read by any group.
		due := put("unread")
		if j := must[Job](t)(s.Job(ctx, "unread")); j != (Job{State: "waiting", Due: due}) {
			t.Fatalf("swept: %+v", j)
		}
		cancel("unread", true)
		if j := must[Job](t)(s.Job(ctx, "unread")); j != (Job{}) {
			t.Fatalf("after Cancel: %+v, want unknown", j)
		}
		if n := b.rdb.XLen(ctx, sk.Events).Val(); n != 0 {
			t.Fatalf("stream holds %d entries, want none", n)
		}

		// Read into a consumer's batch in group a, no call begun.
		put("read")
		if err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "a", Consumer: "c", Streams: []string{sk.Events, ">"}, Count: 10, Block: -1}).Err(); err != nil {
			t.Fatal(err)
		}
		cancel("read", true)
		if p := b.rdb.XPending(ctx, sk.Events, "a").Val(); p.Count != 0 {
			t.Fatalf("group a still holds %d pending", p.Count)
		}
		if n := b.rdb.XLen(ctx, sk.Events).Val(); n != 0 {
			t.Fatalf("stream holds %d entries, want none", n)
		}

		// Begun in group a: running, then finished there while b has
		// not read it.
		due = put("begun")
		r, err := s.Reserve(ctx, "a", "c", WithPollInterval(10*time.Millisecond))
		if err != nil || r.Expiry.Member != "begun" || r.Expiry.Attempt != 1 {
			t.Fatalf("Reserve: %+v %v", r, err)
		}
		cancel("begun", false)
		if j := must[Job](t)(s.Job(ctx, "begun")); j != (Job{State: "running", Due: due, Attempt: 1}) {
			t.Fatalf("running: %+v", j)
		}
		if err := r.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		cancel("begun", false)
		if j := must[Job](t)(s.Job(ctx, "begun")); j != (Job{State: "waiting", Due: due}) {
			t.Fatalf("done in a, unread in b: %+v", j)
		}
		cancel("never", false)
	})
}

// TestJobCancelBelowManyEvents: Cancel finds a job's event under more
// newer events than one call looks through, and the newest put of an ID
// is the one cancelled.
func TestJobCancelBelowManyEvents(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		w := newSweeper(t, s)
		for _, id := range []string{"twice", "old", "twice"} {
			must[time.Time](t)(func() (time.Time, error) { d, _, err := s.Put(ctx, id, time.Second); return d, err }())
			clk.Advance(time.Second)
			must[SweepStats](t)(w.SweepOnce(ctx))
		}
		const newer = store.JobScanCount + 500
		concurrently(t, newer, func(i int) error {
			_, _, err := s.Put(ctx, fmt.Sprintf("n-%d", i), time.Second)
			return err
		})
		clk.Advance(time.Second)
		if st := must[SweepStats](t)(w.SweepOnce(ctx)); st.Expired != newer {
			t.Fatalf("swept %+v, want %d", st, newer)
		}
		for _, id := range []string{"old", "twice", "twice"} {
			if !must[bool](t)(s.Cancel(ctx, id)) {
				t.Fatalf("Cancel %s: false", id)
			}
		}
		if must[bool](t)(s.Cancel(ctx, "never")) {
			t.Fatal("Cancel never: true")
		}
		left := map[string]int{}
		for _, e := range b.rdb.XRange(ctx, s.shards[0].Events, "-", "+").Val() {
			left[e.Values["m"].(string)]++
		}
		if len(left) != newer || left["old"]+left["twice"] != 0 {
			t.Fatalf("%d members left, old %d, twice %d: want the %d newer alone", len(left), left["old"], left["twice"], newer)
		}
	})
}

// TestJobCancelRacesDelivery: jobs due within 40 ms, each cancelled at a
// random moment from 10 ms before its due time to 50 ms after, while a
// sweeper and two groups' consumers (one reading batches, one
// WithConcurrency) run. Violations: a job whose Cancel returned true and
// that reached a handler, or one whose Cancel returned false and that some
// group never got.
func TestJobCancelRacesDelivery(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(4), WithExpiryEvents(), WithConsumerGroups("batch", "pool")))
		var mu sync.Mutex
		got := map[string]map[string]int{"batch": {}, "pool": {}}
		handler := func(group string) func(context.Context, Expiry) error {
			return func(_ context.Context, e Expiry) error {
				mu.Lock()
				got[group][e.Member]++
				mu.Unlock()
				return nil
			}
		}
		runSweeper(t, newSweeper(t, s))
		opts := []ConsumeOption{WithLeaseTTL(time.Second), WithPollInterval(50 * time.Millisecond)}
		consumeInBackground(t, s, "batch", "c", handler("batch"), opts...)
		consumeInBackground(t, s, "pool", "c", handler("pool"), append(opts, WithConcurrency(4))...)

		const jobs = 300
		cancelled := make([]bool, jobs)
		var wg sync.WaitGroup
		errs := make(chan error, jobs)
		for i := range jobs {
			id := fmt.Sprintf("j-%d", i)
			delay := time.Duration(rand.IntN(40)) * time.Millisecond
			if _, _, err := s.Put(ctx, id, delay); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(delay + time.Duration(rand.IntN(60)-10)*time.Millisecond)
				ok, err := s.Cancel(ctx, id)
				if err != nil {
					errs <- err
				}
				cancelled[i] = ok
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		n := 0
		for _, c := range cancelled {
			if c {
				n++
			}
		}
		// Every job not cancelled reaches both groups; then nothing is
		// left to deliver once every stream is empty.
		waitFor(t, "every job not cancelled handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for i, c := range cancelled {
				id := fmt.Sprintf("j-%d", i)
				if !c && (got["batch"][id] == 0 || got["pool"][id] == 0) {
					return false
				}
			}
			return true
		})
		waitFor(t, "every stream empty", func() bool {
			for i := range s.shards {
				if b.rdb.XLen(ctx, s.shards[i].Events).Val() != 0 {
					return false
				}
			}
			return true
		})
		mu.Lock()
		defer mu.Unlock()
		violations := 0
		for i, c := range cancelled {
			id := fmt.Sprintf("j-%d", i)
			if c && got["batch"][id]+got["pool"][id] > 0 {
				violations++
				t.Errorf("%s: Cancel returned true, then handled %d and %d times", id, got["batch"][id], got["pool"][id])
			}
		}
		t.Logf("%d of %d jobs cancelled, %d violations", n, jobs, violations)
		if n == 0 || n == jobs {
			t.Errorf("%d of %d jobs cancelled: the race was not run", n, jobs)
		}
	})
}
