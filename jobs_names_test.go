package expset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// showsJobOwner reports whether text shows the owner jobs and schedules are
// kept under, raw or Go-quoted ("\x00job:12").
func showsJobOwner(text string) bool {
	return strings.Contains(text, jobOwnerPrefix) || strings.Contains(text, `\x00job`)
}

// noJobOwner fails t when what a call returned for display, printed with
// %#v, shows the owner jobs are kept under.
func noJobOwner(t *testing.T, what string, v any) {
	t.Helper()
	if s := fmt.Sprintf("%#v", v); showsJobOwner(s) {
		t.Errorf("%s shows the internal owner of jobs: %s", what, s)
	}
}

// TestJobOwnerNeverShown: jobs put, some dead-lettered in two groups, a
// schedule beside them: no result meant for display shows the owners they
// are kept under, and a job's dead letters name its ID, found by
// JobDeadLetters.
func TestJobOwnerNeverShown(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("g1", "g2"))
		if _, err := s.PutSchedule(ctx, "nightly", "@daily"); err != nil {
			t.Fatal(err)
		}
		bad := []string{"bad-1", "bad-2", "bad-3"}
		for _, id := range append([]string{"ok-1", "ok-2"}, bad...) {
			if _, _, err := s.Put(ctx, id, 0, WithPayload([]byte("p-"+id))); err != nil {
				t.Fatal(err)
			}
		}
		for _, g := range []string{"g1", "g2"} {
			consumeInBackground(t, s, g, "c", func(_ context.Context, e Expiry) error {
				if strings.HasPrefix(e.Member, "bad-") {
					return Bury(errors.New("no such customer"))
				}
				return nil
			}, WithLeaseTTL(600*time.Millisecond), WithOwnerConcurrency(1))
		}
		waitFor(t, "6 dead letters, the rest handled", func() bool {
			ds, err := s.DeadLetters(ctx, -1, 0)
			return err == nil && len(ds) == 6 && shardsIdle(s, 6)
		})

		all := must[[]DeadLetter](t)(s.DeadLetters(ctx, -1, 0))
		noJobOwner(t, "DeadLetters", all)
		for _, d := range all {
			if d.Event.Owner != "" || !slices.Contains(bad, d.Event.Member) {
				t.Errorf("dead letter %s: owner %q, member %q; want \"\" and a bad job's ID", d.ID, d.Event.Owner, d.Event.Member)
			}
		}
		mine := must[[]DeadLetter](t)(s.JobDeadLetters(ctx, "bad-2"))
		noJobOwner(t, "JobDeadLetters", mine)
		if len(mine) != 2 || mine[0].Event.Member != "bad-2" || mine[1].Event.Member != "bad-2" || mine[0].Group == mine[1].Group {
			t.Fatalf("JobDeadLetters(bad-2): %+v; want its letter of each group", mine)
		}
		if ds := must[[]DeadLetter](t)(s.JobDeadLetters(ctx, "ok-1")); len(ds) != 0 {
			t.Fatalf("JobDeadLetters of a job handled: %+v", ds)
		}
		if n := must[int](t)(s.Kick(ctx, mine...)); n != 2 {
			t.Fatalf("kicked %d of bad-2's letters, want 2", n)
		}
		waitFor(t, "bad-2 buried again", func() bool {
			ds, err := s.JobDeadLetters(ctx, "bad-2")
			return err == nil && len(ds) == 2
		})

		noJobOwner(t, "Stats", must[[]ShardStats](t)(s.Stats(ctx)))
		noJobOwner(t, "Groups", must[[]GroupInfo](t)(s.Groups(ctx)))
		noJobOwner(t, "Running", must[RunningCalls](t)(s.Running(ctx, "g1", 100)))
		noJobOwner(t, "Job", must[Job](t)(s.Job(ctx, "bad-1")))
		noJobOwner(t, "Schedules", must[[]Schedule](t)(s.Schedules(ctx)))
		for i := range s.shards {
			evs, _, err := s.ReadEvents(ctx, i, "0-0", 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			noJobOwner(t, "ReadEvents", evs)
		}

		// An error of a call on a job names the job, not its owner's key.
		shard, bucket := s.st.JobBucket("broken")
		b.rdb.Set(ctx, s.shards[shard].OwnerKey(bucket), "not a sorted set", 0)
		for what, err := range map[string]error{
			"Put":        second(s.Put(ctx, "broken", time.Hour)),
			"Reschedule": errOf(s.Reschedule(ctx, "broken", time.Hour)),
			"Cancel":     errOf(s.Cancel(ctx, "broken")),
			"Job":        errOf(s.Job(ctx, "broken")),
		} {
			if err == nil || showsJobOwner(err.Error()) || !strings.Contains(err.Error(), `job "broken"`) {
				t.Errorf("%s on a job whose bucket holds a string: %v; want an error naming the job and no internal owner", what, err)
			}
		}
	})
}

// errOf returns the error of a call with one result beside it.
func errOf[T any](_ T, err error) error { return err }

// second returns the error of a call with two results beside it.
func second[A, B any](_ A, _ B, err error) error { return err }

// TestJobDeadLettersRefusesBadInput: a bad ID or a set without events is
// refused, naming it.
func TestJobDeadLettersRefusesBadInput(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		if _, err := s.JobDeadLetters(ctx, ""); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "job ID") {
			t.Errorf("JobDeadLetters of an empty ID: %v", err)
		}
		plain, _ := newTestSet(t, b)
		if _, err := plain.JobDeadLetters(ctx, "j"); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("JobDeadLetters on a set without events: %v", err)
		}
	})
}

// TestSweepStatsOwnersLeaveJobsOut: a sweep of an owner's member, two jobs
// and a schedule's tick counts one owner and four members.
func TestSweepStatsOwnersLeaveJobsOut(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents())
		must[time.Time](t)(s.PutSchedule(ctx, "nightly", "@daily"))
		must[time.Time](t)(s.Add(ctx, "u", "m", time.Second))
		for _, id := range []string{"j1", "j2"} {
			if _, _, err := s.Put(ctx, id, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(25 * time.Hour)
		st := must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		if st.Owners != 1 || st.Expired != 4 {
			t.Fatalf("SweepOnce: %+v; want Owners 1 (u), Expired 4 (m, two jobs, a tick)", st)
		}
	})
}
