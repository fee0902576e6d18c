package expset

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// liveSweepers returns how many leases the set's sweeper registry holds.
func liveSweepers(t *testing.T, s *Set) int {
	t.Helper()
	reg, err := s.sweepers(context.Background(), "", -1)
	if err != nil {
		t.Fatal(err)
	}
	return len(reg.Tokens)
}

// dueJobs opens a set with events and shards shards, and puts n jobs,
// job-0 to job-<n-1>, due in a millisecond, and moves the set's clock past
// it: due jobs waiting in their buckets for a sweeper (a job put due at
// once would have its event written by Put).
func dueJobs(t *testing.T, b backend, shards, n int) *Set {
	t.Helper()
	s, clk := newTestSet(t, b, WithShards(shards), WithExpiryEvents())
	for i := range n {
		if _, put, err := s.Put(context.Background(), "job-"+strconv.Itoa(i), time.Millisecond); err != nil || !put {
			t.Fatalf("put job-%d: %v, %v", i, put, err)
		}
	}
	clk.Advance(time.Millisecond)
	return s
}

// TestOnlyConsumeGetsDueJobs: a process that runs Consume and no Sweeper
// gets the jobs due, those put before it started and after; two Consumes
// of one Set share one sweeper, which gives up its lease when the last one
// returns.
func TestOnlyConsumeGetsDueJobs(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s := dueJobs(t, b, 4, 5)
		h := newHandledBy()
		handle := func(name string) func(context.Context, Expiry) error {
			return func(_ context.Context, e Expiry) error { return h.call(name, e, nil) }
		}
		stop1 := consumeInBackground(t, s, "g", "c1", handle("c1"), WithLeaseTTL(600*time.Millisecond))
		waitFor(t, "the 5 jobs due handled", func() bool { return h.count() == 5 })
		stop2 := consumeInBackground(t, s, "g", "c2", handle("c2"), WithLeaseTTL(600*time.Millisecond))
		if _, _, err := s.Put(context.Background(), "late", 0); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the job put later handled", func() bool { return h.count() == 6 })
		if n := liveSweepers(t, s); n != 1 {
			t.Fatalf("%d sweeper leases for two Consumes of one Set, want 1", n)
		}
		stop1()
		if n := liveSweepers(t, s); n != 1 {
			t.Fatalf("%d sweeper leases after the first Consume returned, want 1 (the second still runs)", n)
		}
		stop2()
		if n := liveSweepers(t, s); n != 0 {
			t.Fatalf("%d sweeper leases after both Consumes returned, want 0", n)
		}
		for _, e := range h.events() {
			if e.Owner != "" || e.Attempt != 1 {
				t.Errorf("job %s: owner %q, attempt %d; want \"\" and 1", e.Member, e.Owner, e.Attempt)
			}
		}
	})
}

// TestOnlyReserveGetsDueJobs: a program that runs a loop of Reserve and
// Finish and no Sweeper gets the jobs due; its sweeper stops when the
// calls do.
func TestOnlyReserveGetsDueJobs(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s := dueJobs(t, b, 4, 5)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got := map[string]bool{}
		for len(got) < 5 {
			r, err := s.Reserve(ctx, "g", "c", WithLeaseTTL(600*time.Millisecond))
			if err != nil {
				t.Fatalf("Reserve after %d jobs: %v", len(got), err)
			}
			got[r.Expiry.Member] = true
			if err := r.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the sweeper's lease given up after the last Reserve", func() bool { return liveSweepers(t, s) == 0 })
	})
}

// TestWithoutSweeperStalls: a Consume WithoutSweeper and no Sweeper leave
// due jobs where they are, and Stats says so (due work, no sweeper); a
// Sweeper.Run then delivers them.
func TestWithoutSweeperStalls(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s := dueJobs(t, b, 1, 3)
		h := newHandledBy()
		stop := consumeInBackground(t, s, "g", "c", func(_ context.Context, e Expiry) error { return h.call("c", e, nil) },
			WithLeaseTTL(600*time.Millisecond), WithoutSweeper())
		st := must[[]ShardStats](t)(s.Stats(context.Background()))[0]
		if !st.Stalled || st.Leased || st.JobsDue != 3 || st.Owners != 0 || st.OwnersDue != 0 || st.MembersDue != 0 {
			t.Fatalf("stats %+v: want Stalled, not Leased, JobsDue 3, no owners", st)
		}
		if n := liveSweepers(t, s); n != 0 || h.count() != 0 {
			t.Fatalf("%d sweeper leases, %d jobs handled: want none", n, h.count())
		}
		stopSweeper := runSweeper(t, newSweeper(t, s))
		waitFor(t, "the jobs handled once a Sweeper runs", func() bool { return h.count() == 3 })
		st = must[[]ShardStats](t)(s.Stats(context.Background()))[0]
		if st.Stalled || !st.Leased || st.JobsDue != 0 {
			t.Fatalf("stats %+v with a Sweeper running: want Leased, not Stalled, no job due", st)
		}
		stopSweeper()
		stop()
	})
}

// TestWithoutSweeperOptionTypes: WithoutSweeper is an option of both
// Consume and Reserve; a misused Consume starts no sweeper.
func TestWithoutSweeperOptionTypes(t *testing.T) {
	t.Parallel()
	var _ ConsumeOption = WithoutSweeper()
	var _ ReserveOption = WithoutSweeper()
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		err := s.Consume(context.Background(), "", "c", func(context.Context, Expiry) error { return nil })
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Consume with no group: %v, want ErrInvalidArgument", err)
		}
		if s.sweeping.users != 0 || liveSweepers(t, s) != 0 {
			t.Fatal("a refused Consume left a sweeper")
		}
	})
}
