package expset

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOwnedJobPutUnlessWaiting: a job of an owner is put unless it waits
// already, is a member of its owner for the owner's reads and quota, and
// is delivered with its owner; the same ID under another owner, and
// without one, are two more jobs.
func TestOwnedJobPutUnlessWaiting(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithPayloadStorage())
		due, put, err := s.Put(ctx, "a", time.Minute, WithOwner("u"), WithPayload([]byte("u-first")))
		if err != nil || !put || !due.Equal(clk.Now().Add(time.Minute)) {
			t.Fatalf("Put: %v %v %v", due, put, err)
		}
		again, put, err := s.Put(ctx, "a", time.Second, WithPayload([]byte("u-second")), WithOwner("u"))
		if err != nil || put || !again.Equal(due) {
			t.Fatalf("second Put: %v %v %v, want %v false", again, put, err, due)
		}
		// The same ID under another owner and under none: two more jobs.
		dueV := must[time.Time](t)(putNew(ctx, s, "a", 2*time.Minute, WithOwner("v"), WithPayload([]byte("v"))))
		dueNone := must[time.Time](t)(putNew(ctx, s, "a", 3*time.Minute, WithPayload([]byte("none"))))
		for _, c := range []struct {
			opts []JobOption
			due  time.Time
		}{{[]JobOption{WithOwner("u")}, due}, {[]JobOption{WithOwner("v")}, dueV}, {nil, dueNone}} {
			if j := must[Job](t)(s.Job(ctx, "a", c.opts...)); j != (Job{State: "waiting", Due: c.due}) {
				t.Errorf("Job(a, %d options): %+v, want waiting due %v", len(c.opts), j, c.due)
			}
		}
		// The owner's reads see it as a member, its quota counts it.
		if n := must[int](t)(s.Count(ctx, "u")); n != 1 {
			t.Errorf("Count(u) = %d, want 1", n)
		}
		if d := must[time.Time](t)(s.Deadline(ctx, "u", "a")); !d.Equal(due) {
			t.Errorf("Deadline(u, a) = %v, want %v", d, due)
		}
		if ms := must[[]Member](t)(s.Members(ctx, "v", 0)); len(ms) != 1 || ms[0].ID != "a" || !ms[0].Deadline.Equal(dueV) {
			t.Errorf("Members(v) = %+v", ms)
		}
		if p := must[[]byte](t)(s.Payload(ctx, "u", "a")); string(p) != "u-first" {
			t.Errorf("Payload(u, a) = %q, want the first put's", p)
		}
		q := must[*Quota](t)(NewQuota(s, 1))
		if d := must[Decision](t)(q.Acquire(ctx, "u", "b", time.Minute)); d.Allowed || d.Count != 1 {
			t.Errorf("Acquire beside u's job at limit 1: %+v, want denied", d)
		}
		clk.Advance(3 * time.Minute)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		var got []string
		for _, e := range readAll(t, s) {
			got = append(got, e.Owner+"/"+e.Member+"/"+string(e.Payload)+"/"+e.Deadline.Sub(due).String())
		}
		sort.Strings(got)
		want := []string{"/a/none/2m0s", "u/a/u-first/0s", "v/a/v/1m0s"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
		if _, put, err := s.Put(ctx, "a", time.Second, WithOwner("u")); err != nil || !put {
			t.Fatalf("Put after the sweep: %v %v, want a new job", put, err)
		}
	})
}

// putNew puts a new job and returns its due time, or an error when it was
// not put.
func putNew(ctx context.Context, s *Set, id string, delay time.Duration, opts ...PutOption) (time.Time, error) {
	due, put, err := s.Put(ctx, id, delay, opts...)
	if err == nil && !put {
		err = errors.New("not put: one waits")
	}
	return due, err
}

// TestOwnedJobRescheduleAndCancel: Reschedule and Cancel find a job of an
// owner by its owner and ID only; Cancel reaches it waiting and once its
// event is written and not begun.
func TestOwnedJobRescheduleAndCancel(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("g"))
		must[time.Time](t)(putNew(ctx, s, "a", time.Minute, WithOwner("u"), WithPayload([]byte("p"))))
		moved, err := s.Reschedule(ctx, "a", 10*time.Second, WithOwner("u"))
		if err != nil || !moved.Equal(clk.Now().Add(10*time.Second)) {
			t.Fatalf("Reschedule: %v %v", moved, err)
		}
		if d := must[time.Time](t)(s.Deadline(ctx, "u", "a")); !d.Equal(moved) {
			t.Errorf("Deadline after Reschedule: %v, want %v", d, moved)
		}
		for _, opts := range [][]JobOption{nil, {WithOwner("v")}} {
			if _, err := s.Reschedule(ctx, "a", time.Second, opts...); !errors.Is(err, ErrNotFound) {
				t.Errorf("Reschedule of a, %d options: %v, want ErrNotFound", len(opts), err)
			}
			if ok := must[bool](t)(s.Cancel(ctx, "a", opts...)); ok {
				t.Errorf("Cancel of a, %d options: true, want false (another job)", len(opts))
			}
		}
		if ok := must[bool](t)(s.Cancel(ctx, "a", WithOwner("u"))); !ok {
			t.Fatal("Cancel of a waiting job of u: false")
		}
		if n := must[int](t)(s.Count(ctx, "u")); n != 0 {
			t.Errorf("Count(u) after Cancel: %d", n)
		}
		if _, err := s.Payload(ctx, "u", "a"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Payload after Cancel: %v, want ErrNotFound", err)
		}
		if j := must[Job](t)(s.Job(ctx, "a", WithOwner("u"))); j != (Job{}) {
			t.Errorf("Job after Cancel: %+v, want unknown", j)
		}
		// Due and swept: the event is written; Cancel deletes it.
		due := must[time.Time](t)(putNew(ctx, s, "b", time.Second, WithOwner("u"), WithPayload([]byte("p"))))
		must[time.Time](t)(putNew(ctx, s, "b", time.Second, WithPayload([]byte("ownerless"))))
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		if j := must[Job](t)(s.Job(ctx, "b", WithOwner("u"))); j != (Job{State: "waiting", Due: due}) {
			t.Fatalf("Job of b swept, not read: %+v", j)
		}
		if ok := must[bool](t)(s.Cancel(ctx, "b", WithOwner("u"))); !ok {
			t.Fatal("Cancel of b's event, not begun: false")
		}
		if evs := readAll(t, s); len(evs) != 1 || evs[0].Owner != "" || evs[0].Member != "b" {
			t.Fatalf("events after Cancel: %+v, want the ownerless b alone", evs)
		}
		if j := must[Job](t)(s.Job(ctx, "b", WithOwner("u"))); j != (Job{}) {
			t.Errorf("Job of b after Cancel: %+v, want unknown", j)
		}
		if j := must[Job](t)(s.Job(ctx, "b")); j.State != "waiting" {
			t.Errorf("ownerless b after u's b was cancelled: %+v, want waiting", j)
		}
	})
}

// TestOwnedJobStates: Job reads a job of an owner waiting, running (in its
// handler, whose event carries the owner), dead and then unknown once
// done; JobDeadLetters finds its dead letter by owner.
func TestOwnedJobStates(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("mail"))
		for _, id := range []string{"ok", "fails"} {
			must[time.Time](t)(putNew(ctx, s, id, time.Second, WithOwner("u"), WithPayload([]byte("p-"+id))))
		}
		due := clk.Now().Add(time.Second)
		if j := must[Job](t)(s.Job(ctx, "ok", WithOwner("u"))); j != (Job{State: "waiting", Due: due}) {
			t.Fatalf("put: %+v", j)
		}
		clk.Advance(time.Second)
		var mu sync.Mutex
		var seen []Expiry
		inCall := map[string]Job{}
		handle := func(_ context.Context, e Expiry) error {
			j, err := s.Job(ctx, e.Member, WithOwner(e.Owner))
			mu.Lock()
			seen = append(seen, e)
			inCall[e.Member] = j
			mu.Unlock()
			if err != nil {
				return err
			}
			if e.Member == "fails" {
				return errors.New("no such address")
			}
			return nil
		}
		stop := consumeInBackground(t, s, "mail", "m", handle, WithMaxAttempts(1), WithLeaseTTL(50*time.Millisecond), WithPollInterval(5*time.Millisecond))
		waitFor(t, "fails dead", func() bool { return must[Job](t)(s.Job(ctx, "fails", WithOwner("u"))).State == "dead" })
		waitFor(t, "ok done", func() bool { return must[Job](t)(s.Job(ctx, "ok", WithOwner("u"))) == Job{} })
		stop()
		mu.Lock()
		defer mu.Unlock()
		for _, id := range []string{"ok", "fails"} {
			if j := inCall[id]; j != (Job{State: "running", Due: due, Attempt: 1}) {
				t.Errorf("%s during its call: %+v, want running, attempt 1", id, j)
			}
		}
		for _, e := range seen {
			if e.Owner != "u" || string(e.Payload) != "p-"+e.Member || !e.Deadline.Equal(due) {
				t.Errorf("handler got %+v, want owner u with its payload", e)
			}
		}
		if j := must[Job](t)(s.Job(ctx, "fails", WithOwner("u"))); j != (Job{State: "dead", Due: due}) {
			t.Errorf("fails: %+v, want dead", j)
		}
		if j := must[Job](t)(s.Job(ctx, "fails")); j != (Job{}) {
			t.Errorf("fails without its owner: %+v, want unknown", j)
		}
		dls := must[[]DeadLetter](t)(s.JobDeadLetters(ctx, "fails", WithOwner("u")))
		if len(dls) != 1 || dls[0].Event.Owner != "u" || dls[0].Event.Member != "fails" || dls[0].Group != "mail" {
			t.Errorf("JobDeadLetters(fails, u): %+v, want mail's one", dls)
		}
		if dls := must[[]DeadLetter](t)(s.JobDeadLetters(ctx, "fails")); len(dls) != 0 {
			t.Errorf("JobDeadLetters(fails) without its owner: %+v, want none", dls)
		}
	})
}

// TestOwnedJobsOwnerConcurrency: jobs of an owner take its slots under
// WithOwnerConcurrency(1): a handler-side count never sees two calls of
// one owner at once, while calls of two owners may overlap. The jobs are
// put due at once: Put writes their events, and no sweeper runs.
func TestOwnedJobsOwnerConcurrency(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithConsumerGroups("g"))
		const perOwner = 6
		owners := []string{"u", "v"}
		for _, o := range owners {
			for i := range perOwner {
				must[time.Time](t)(putNew(ctx, s, "j"+itoa(int64(i)), 0, WithOwner(o)))
			}
		}
		var (
			mu         sync.Mutex
			running    = map[string]int{}
			handled    int
			violations int
			wrongOwner int
		)
		handle := func(_ context.Context, e Expiry) error {
			mu.Lock()
			running[e.Owner]++
			if running[e.Owner] > 1 {
				violations++
			}
			if e.Owner != "u" && e.Owner != "v" {
				wrongOwner++
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			running[e.Owner]--
			handled++
			mu.Unlock()
			return nil
		}
		stop := consumeInBackground(t, s, "g", "c", handle, WithConcurrency(4), WithOwnerConcurrency(1), WithPollInterval(5*time.Millisecond), WithoutSweeper())
		waitFor(t, "every job handled", func() bool { mu.Lock(); defer mu.Unlock(); return handled >= perOwner*len(owners) })
		stop()
		mu.Lock()
		defer mu.Unlock()
		if violations != 0 || wrongOwner != 0 || handled != perOwner*len(owners) {
			t.Fatalf("%d calls began with another of their owner running, %d with a wrong owner, %d handled (want 0, 0, %d)", violations, wrongOwner, handled, perOwner*len(owners))
		}
	})
}

// TestOwnedJobBadOwner: every job call refuses an owner Set.Add refuses,
// with ErrInvalidArgument naming WithOwner, and changes nothing.
func TestOwnedJobBadOwner(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage())
		must[time.Time](t)(putNew(ctx, s, "a", time.Minute, WithOwner("u"), WithPayload([]byte("p"))))
		must[time.Time](t)(putNew(ctx, s, "a", time.Minute))
		before := snapshot(t, b.rdb, s.Name())
		for _, owner := range []string{"", strings.Repeat("o", maxOwnerLen+1), jobOwnerPrefix + "0", jobOwnerPrefix + "sched"} {
			o := WithOwner(owner)
			errs := map[string]error{}
			_, _, errs["Put"] = s.Put(ctx, "a", time.Second, WithPayload([]byte("x")), o)
			_, errs["Reschedule"] = s.Reschedule(ctx, "a", time.Second, o)
			_, errs["Cancel"] = s.Cancel(ctx, "a", o)
			_, errs["Job"] = s.Job(ctx, "a", o)
			_, errs["JobDeadLetters"] = s.JobDeadLetters(ctx, "a", o)
			for call, err := range errs {
				if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "WithOwner") {
					t.Errorf("%s with owner %.20q: %v, want ErrInvalidArgument naming WithOwner", call, owner, err)
				}
			}
		}
		if after := snapshot(t, b.rdb, s.Name()); !reflect.DeepEqual(before, after) {
			t.Fatal("a call refused for its owner changed the set")
		}
	})
}
