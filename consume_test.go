package expset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fastConsume are options that make redelivery quick in tests, which
// sweep when they choose to (SweepOnce on a fake clock): the consumers run
// no sweeper.
var fastConsume = []ConsumeOption{WithLeaseTTL(60 * time.Millisecond), WithPollInterval(5 * time.Millisecond), WithoutSweeper()}

// consumeInBackground runs s.Consume until the returned stop is called (or t
// ends) and checks that it returned nil.
func consumeInBackground(t *testing.T, s *Set, group, name string, handle func(context.Context, Expiry) error, opts ...ConsumeOption) (stop func()) {
	t.Helper()
	return background(t, "Consume", func(ctx context.Context) error {
		return s.Consume(ctx, group, name, handle, opts...)
	})
}

// recorder collects the events a handler saw.
type recorder struct {
	mu  sync.Mutex
	got []Expiry
}

func (r *recorder) add(e Expiry) {
	r.mu.Lock()
	r.got = append(r.got, e)
	r.mu.Unlock()
}

func (r *recorder) events() []Expiry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Expiry(nil), r.got...)
}

func (r *recorder) len() int { return len(r.events()) }

// expire adds n members (owners o0.., member m) expiring in 1s, with
// payloads p0.., moves the clock past them and sweeps.
func expire(t *testing.T, s *Set, clk *fakeClock, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		must[time.Time](t)(s.Add(ctx, "o"+strconv.Itoa(i), "m", time.Second, WithPayload([]byte("p"+strconv.Itoa(i)))))
	}
	clk.Advance(time.Second)
	st, err := newSweeper(t, s).SweepOnce(ctx)
	if err != nil || st.Expired != n {
		t.Fatalf("sweep: %+v %v, want %d expired", st, err, n)
	}
}

func TestConsumeDeliversOnce(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 50)
		var rec recorder
		stop := consumeInBackground(t, s, "g", "c1", func(_ context.Context, e Expiry) error {
			rec.add(e)
			return nil
		}, WithPollInterval(5*time.Millisecond))
		waitFor(t, "50 events", func() bool { return rec.len() >= 50 })
		stop()
		seen := map[string]bool{}
		for _, e := range rec.events() {
			want := "p" + strings.TrimPrefix(e.Owner, "o")
			if e.Attempt != 1 || e.Member != "m" || string(e.Payload) != want || !e.Deadline.Equal(clk.Now()) || e.Shard != s.ShardOf(e.Owner) {
				t.Errorf("event %+v", e)
			}
			if seen[e.Owner] {
				t.Errorf("%s delivered twice", e.Owner)
			}
			seen[e.Owner] = true
		}
		if len(seen) != 50 {
			t.Fatalf("%d owners' events, want 50", len(seen))
		}
		stats := must[[]ShardStats](t)(s.Stats(context.Background()))
		for _, st := range stats {
			if st.Events != 0 || st.Pending != 0 || st.Dead != 0 || st.Owners != 0 {
				t.Errorf("shard %d after consuming everything: %+v", st.Shard, st)
			}
		}
	})
}

// TestConsumeCrashRedelivers: a consumer that dies in its handler; its
// event comes again to another consumer, with attempt 2, only after the
// lease TTL has passed since the dead consumer's last renewal.
func TestConsumeCrashRedelivers(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 1)
		// The event is delivered after this instant: it cannot be claimed
		// before started plus the lease TTL. (The time the crashed
		// Consume returns would be no bound: on a loaded machine it can come
		// long after the delivery.)
		started := time.Now()
		first := crashInHandler(t, b.client(t), s, "g", "doomed", fastConsume...)
		if first.Attempt != 1 {
			t.Fatalf("first delivery %+v", first)
		}
		var rec recorder
		var at time.Time
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			if rec.len() == 0 {
				at = time.Now()
			}
			rec.add(e)
			return nil
		}, fastConsume...)
		waitFor(t, "the redelivery", func() bool { return rec.len() == 1 })
		time.Sleep(150 * time.Millisecond)
		stop()
		got := rec.events()
		if len(got) != 1 || got[0].Attempt != 2 || got[0].ID != first.ID || string(got[0].Payload) != "p0" {
			t.Fatalf("redelivered %+v, want the same event at attempt 2", got)
		}
		if wait := at.Sub(started); wait < 50*time.Millisecond {
			t.Fatalf("redelivered %v after the first Consume started, before the 60ms lease TTL", wait)
		}
	})
}

// TestConsumeDeadLetterAndKick: a handler that always fails buries its event
// after WithMaxAttempts attempts; kicked back, it is consumed from attempt 1.
func TestConsumeDeadLetterAndKick(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 2)
		ctx := context.Background()
		var failed recorder
		stop := consumeInBackground(t, s, "g", "c1", func(_ context.Context, e Expiry) error {
			failed.add(e)
			return fmt.Errorf("boom %d", e.Attempt)
		}, append(fastConsume, WithMaxAttempts(3))...)
		waitFor(t, "two dead letters", func() bool {
			d, err := s.DeadLetters(ctx, allShards, 0)
			return err == nil && len(d) == 2
		})
		stop()
		attempts := map[string][]int{}
		for _, e := range failed.events() {
			attempts[e.Owner] = append(attempts[e.Owner], e.Attempt)
		}
		for _, o := range []string{"o0", "o1"} {
			if fmt.Sprint(attempts[o]) != "[1 2 3]" {
				t.Errorf("%s attempts %v, want [1 2 3]", o, attempts[o])
			}
		}
		dead := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0))
		for _, d := range dead {
			e := d.Event
			if d.Error != "boom 3" || d.Group != "g" || d.Consumer != "c1" || e.Attempt != 3 || e.Member != "m" ||
				string(e.Payload) != "p"+strings.TrimPrefix(e.Owner, "o") || !e.Deadline.Equal(clk.Now()) || d.Shard != s.ShardOf(e.Owner) {
				t.Errorf("dead letter %+v", d)
			}
		}
		if one := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 1)); len(one) != 1 {
			t.Errorf("DeadLetters(count 1): %d", len(one))
		}
		if _, err := s.DeadLetters(ctx, 2, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("DeadLetters(shard 2 of 2): %v", err)
		}
		for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
			if st.Events != 0 || st.Pending != 0 {
				t.Errorf("shard %d: %+v: buried events left in the stream", st.Shard, st)
			}
		}

		// A malformed ID in a later shard rejects the whole call before any
		// shard is touched, and ReadEvents refuses a malformed cursor.
		bad := DeadLetter{Shard: 1 - dead[0].Shard, ID: "not-an-id"}
		for _, call := range []func() (int, error){
			func() (int, error) { return s.Kick(ctx, dead[0], bad) },
			func() (int, error) { return s.DeleteDeadLetters(ctx, dead[0], bad) },
		} {
			if n, err := call(); n != 0 || !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("dead-letter call with a malformed ID: %d, %v; want 0, ErrInvalidArgument", n, err)
			}
		}
		if again := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0)); len(again) != len(dead) {
			t.Fatalf("a rejected call changed the dead letters: %d, want %d", len(again), len(dead))
		}
		for _, after := range []string{"", "x", "1-", "-1", "1-2-3"} {
			if _, _, err := s.ReadEvents(ctx, 0, after, 10, 0); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("ReadEvents(after %q): %v, want ErrInvalidArgument", after, err)
			}
		}

		// Kick one back, delete the other.
		if n := must[int](t)(s.Kick(ctx, dead[0])); n != 1 {
			t.Fatalf("kicked %d", n)
		}
		if n := must[int](t)(s.Kick(ctx, dead[0])); n != 0 {
			t.Fatalf("kicked %d the second time", n)
		}
		if n := must[int](t)(s.DeleteDeadLetters(ctx, dead[1])); n != 1 {
			t.Fatalf("deleted %d", n)
		}
		var rec recorder
		stop = consumeInBackground(t, s, "g", "c2", func(_ context.Context, e Expiry) error {
			rec.add(e)
			return nil
		}, fastConsume...)
		waitFor(t, "the kicked event", func() bool { return rec.len() == 1 })
		stop()
		got := rec.events()[0]
		if got.Attempt != 1 || got.Owner != dead[0].Event.Owner || string(got.Payload) != string(dead[0].Event.Payload) || !got.Deadline.Equal(clk.Now()) {
			t.Fatalf("kicked event %+v, want %+v from attempt 1", got, dead[0].Event)
		}
		if d := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0)); len(d) != 0 {
			t.Fatalf("dead letters left: %+v", d)
		}
	})
}

// TestConsumeCrashOnLastAttempt: an event whose last handler call never
// returned (its consumer died) is buried by the next consumer that claims
// it, not handled.
func TestConsumeCrashOnLastAttempt(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 1)
		ctx, crash := context.WithCancel(context.Background())
		opts := append(fastConsume, WithMaxAttempts(1))
		_ = s.Consume(ctx, "g", "doomed", func(context.Context, Expiry) error {
			crash()
			return nil // succeeds just as ctx ends
		}, opts...)
		// Success is acknowledged even after ctx ended: nothing is left.
		if st := must[[]ShardStats](t)(s.Stats(context.Background()))[0]; st.Events != 0 || st.Pending != 0 {
			t.Fatalf("a handled event was not acknowledged: %+v", st)
		}

		expire(t, s, clk, 1)
		crashInHandler(t, b.client(t), s, "g", "doomed", opts...)
		var rec recorder
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			rec.add(e)
			return nil
		}, opts...)
		waitFor(t, "the dead letter", func() bool {
			d, err := s.DeadLetters(context.Background(), 0, 0)
			return err == nil && len(d) == 1
		})
		stop()
		if rec.len() != 0 {
			t.Fatalf("handled after its last attempt: %+v", rec.events())
		}
		d := must[[]DeadLetter](t)(s.DeadLetters(context.Background(), 0, 0))[0]
		if d.Event.Attempt != 1 || d.Consumer != "heir" || !strings.Contains(d.Error, "did not finish") {
			t.Fatalf("dead letter %+v", d)
		}
	})
}

func TestConsumeInvalid(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newTestSet(t, b, WithExpiryEvents())
		ok := func(context.Context, Expiry) error { return nil }
		ctx := context.Background()
		long := strings.Repeat("x", maxConsumerLen+1)
		for _, c := range []struct {
			group, name string
			handle      func(context.Context, Expiry) error
			opts        []ConsumeOption
			want        error
		}{
			{"", "c", ok, nil, ErrInvalidArgument},
			{"g", "", ok, nil, ErrInvalidArgument},
			{long, "c", ok, nil, ErrInvalidArgument},
			{"g", "c", nil, nil, ErrInvalidArgument},
			{"g", "c", ok, []ConsumeOption{WithMaxAttempts(0)}, ErrInvalidArgument},
			{"g", "c", ok, []ConsumeOption{WithLeaseTTL(0)}, ErrInvalidArgument},
			{"g", "c", ok, []ConsumeOption{WithReadBatch(1001)}, ErrInvalidArgument},
			{"g", "c", ok, []ConsumeOption{WithPollInterval(time.Hour)}, ErrInvalidArgument},
			{"g", "c", ok, []ConsumeOption{WithMaxHandlingTime(0)}, ErrInvalidArgument},
		} {
			if err := s.Consume(ctx, c.group, c.name, c.handle, c.opts...); !errors.Is(err, c.want) {
				t.Errorf("Consume(%q, %q): %v, want %v", c.group, c.name, err, c.want)
			}
		}
		plain, _ := newTestSet(t, b)
		keys := setKeys(t, b.rdb, s.Name())
		if err := plain.Consume(ctx, "g", "c", ok); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Consume without events: %v", err)
		}
		if _, err := Open(context.Background(), b.rdb, s.Name(), WithExpiryEvents(), WithConsumerGroups("billing", "")); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WithConsumerGroups with an empty name: %v", err)
		}
		if _, err := Open(context.Background(), b.rdb, s.Name(), WithExpiryEvents(), WithConsumerGroups(long)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WithConsumerGroups with a long name: %v", err)
		}
		if _, err := Open(context.Background(), b.rdb, plain.Name(), WithConsumerGroups("billing")); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WithConsumerGroups without events: %v", err)
		}
		if after := setKeys(t, b.rdb, s.Name()); !slices.Equal(after, keys) {
			t.Errorf("rejected calls wrote keys: %v, want %v", after, keys)
		}
	})
}

// TestConsumeReturnsPromptly: an idle Consume returns when ctx ends, without
// finishing its wait between polls (a minute here, twice the test's
// deadline).
func TestConsumeReturnsPromptly(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newTestSet(t, b, WithExpiryEvents())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- s.Consume(ctx, "g", "c", func(context.Context, Expiry) error { return nil }, WithPollInterval(time.Minute))
		}()
		time.Sleep(150 * time.Millisecond) // Consume found the streams empty and waits
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Consume still waiting for its next poll 30s after its ctx ended")
		}
	})
}

func TestStats(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents())
		ctx := context.Background()
		t0 := clk.Now()
		for i, ttl := range []time.Duration{time.Second, 2 * time.Second, time.Hour} {
			must[time.Time](t)(s.Add(ctx, "a", "m"+strconv.Itoa(i), ttl))
		}
		must[time.Time](t)(s.Add(ctx, "b", "m", 2*time.Second))
		must[time.Time](t)(s.Add(ctx, "c", "m", time.Hour))
		clk.Advance(3 * time.Second)
		st := must[[]ShardStats](t)(s.Stats(ctx))[0]
		want := ShardStats{Now: clk.Now(), Owners: 3, OwnersDue: 2, MembersDue: 3, OldestDue: t0.Add(time.Second), Stalled: true,
			EventsKey: "expset:{" + s.Name() + ":0}:ev", DeadLettersKey: "expset:{" + s.Name() + ":0}:dead"}
		if st != want {
			t.Fatalf("stats %+v\nwant  %+v", st, want)
		}
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		st = must[[]ShardStats](t)(s.Stats(ctx))[0]
		want = ShardStats{Now: clk.Now(), Owners: 2, Events: 3, EventsKey: want.EventsKey, DeadLettersKey: want.DeadLettersKey}
		if st != want {
			t.Fatalf("after the sweep %+v\nwant  %+v", st, want)
		}
	})
}

// TestRewriteBehindManyExpired: an Add or Acquire of a member that expired
// while its owner holds more expired members than one write drops (1000)
// must not revive it without its event: the member's expiry gets its event,
// with the old deadline and payload, and the write starts it afresh.
func TestRewriteBehindManyExpired(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for _, op := range []string{"Add", "Acquire"} {
			s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithPayloadStorage())
			ctx := context.Background()
			sk := s.shards[0]
			// 1001 members expired 1001ms .. 1ms ago, written directly.
			t0 := clk.Now().UnixMilli()
			var zs []redis.Z
			pl := map[string]any{}
			for i := 0; i <= 1000; i++ {
				m := fmt.Sprintf("m%04d", i)
				zs = append(zs, redisZ(float64(t0+int64(i)), m))
				pl[m] = "p" + m
			}
			b.rdb.ZAdd(ctx, s.OwnerKey("o"), zs...)
			b.rdb.HSet(ctx, sk.Payload+"o", pl)
			b.rdb.ZAdd(ctx, sk.Due, redisZ(float64(t0), "o"))
			clk.Advance(2 * time.Second)
			last := "m1000" // the latest deadline: beyond the first 1000 dropped
			var d time.Time
			if op == "Add" {
				d = must[time.Time](t)(s.Add(ctx, "o", last, time.Hour, WithPayload([]byte("new"))))
			} else {
				dec := must[Decision](t)(must[*Quota](t)(NewQuota(s, 3)).Acquire(ctx, "o", last, time.Hour, WithPayload([]byte("new"))))
				if !dec.Allowed || dec.Existing || dec.Count != 1 {
					t.Fatalf("%s: %+v, want a fresh admission", op, dec)
				}
				d = dec.Deadline
			}
			st := must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
			n := 0
			for _, e := range eventsOf(t, s) {
				if e.Member == last {
					n++
					if e.Deadline.UnixMilli() != t0+1000 || string(e.Payload) != "p"+last {
						t.Errorf("%s: event %+v, want the old deadline and payload", op, e)
					}
				}
			}
			if n != 1 || len(eventsOf(t, s)) != 1001 {
				t.Fatalf("%s: %d events for %s, %d in all (swept %+v); want 1 and 1001", op, n, last, len(eventsOf(t, s)), st)
			}
			if ms := must[[]Member](t)(s.Members(ctx, "o", 0)); len(ms) != 1 || ms[0].ID != last || !ms[0].Deadline.Equal(d) {
				t.Fatalf("%s: members %v, want %s until %v", op, ms, last, d)
			}
			if p := must[[]byte](t)(s.Payload(ctx, "o", last)); string(p) != "new" {
				t.Fatalf("%s: payload %q, want the new one", op, p)
			}
		}
	})
}
