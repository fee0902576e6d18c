package expset

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the DST test's zone, on machines without zoneinfo

	"github.com/robfig/cron/v3"
)

// ticksOf reads every event of s's streams (outside any group) and returns
// the ticks of schedule id, in stream order per shard, failing on an event
// of id that is not a tick.
func ticksOf(t *testing.T, s *Set, id string) []time.Time {
	t.Helper()
	var out []time.Time
	for shard := range s.Shards() {
		after := "0"
		for {
			es, next, err := s.ReadEvents(context.Background(), shard, after, 1000, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if e.Member != id {
					continue
				}
				if !e.Tick || e.Owner != "" {
					t.Fatalf("event of %s: Tick %v, Owner %q", id, e.Tick, e.Owner)
				}
				out = append(out, e.Deadline)
			}
			if len(es) == 0 {
				break
			}
			after = next
		}
	}
	return out
}

// secondsAfter returns base + k seconds for k in from..to.
func secondsAfter(base time.Time, from, to int) []time.Time {
	var out []time.Time
	for k := from; k <= to; k++ {
		out = append(out, base.Add(time.Duration(k)*time.Second))
	}
	return out
}

func sameTimes(t *testing.T, what string, got, want []time.Time) {
	t.Helper()
	g, w := make([]int64, len(got)), make([]int64, len(want))
	for i := range got {
		g[i] = got[i].UnixMilli()
	}
	for i := range want {
		w[i] = want[i].UnixMilli()
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: got %d ticks %v, want %d %v", what, len(g), fmtTimes(got), len(w), fmtTimes(want))
	}
}

func fmtTimes(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.UTC().Format("01-02T15:04:05.000")
	}
	return out
}

// TestScheduleEveryFiresEachTickOnce sweeps an @every 1s schedule second
// by second with two sweepers taking turns, past several refills of its
// tick list: one event per tick, with its payload, none twice.
func TestScheduleEveryFiresEachTickOnce(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents())
		s2, err := Open(ctx, b.client(t), s.name, WithClock(clk.Now), WithExpiryEvents())
		if err != nil {
			t.Fatal(err)
		}
		base := clk.Now() // whole second
		next, err := s.PutSchedule(ctx, "beat", "@every 1s", WithPayload([]byte("hi")))
		if err != nil {
			t.Fatal(err)
		}
		if !next.Equal(base.Add(time.Second)) {
			t.Fatalf("next tick %v, want %v", next, base.Add(time.Second))
		}
		w1, w2 := newSweeper(t, s), newSweeper(t, s2)
		for i := 1; i <= 80; i++ {
			clk.Advance(time.Second)
			w := w1
			if i%2 == 0 {
				w = w2
			}
			if _, err := w.SweepOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
		sameTimes(t, "ticks", ticksOf(t, s, "beat"), secondsAfter(base, 1, 80))
		ls, err := s.Schedules(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []Schedule{{ID: "beat", Spec: "@every 1s", CatchUp: 1, Payload: []byte("hi"), Next: base.Add(81 * time.Second), Last: base.Add(80 * time.Second)}}
		if !reflect.DeepEqual(ls, want) {
			t.Fatalf("Schedules: %+v, want %+v", ls, want)
		}
		es, _, _ := s.ReadEvents(ctx, s.ShardOf("beat"), "0", 1, 0)
		if len(es) != 1 || string(es[0].Payload) != "hi" {
			t.Fatalf("first event %+v, want payload hi", es)
		}
	})
}

// TestScheduleConcurrentSweepers sweeps one schedule from four goroutines
// at once, each with its own client, while the clock moves: each tick is
// written once whoever sweeps it.
func TestScheduleConcurrentSweepers(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithShards(2))
		base := clk.Now()
		if _, err := s.PutSchedule(ctx, "beat", "@every 1s"); err != nil {
			t.Fatal(err)
		}
		var sweepers []*Sweeper
		for range 4 {
			si, err := Open(ctx, b.client(t), s.name, WithClock(clk.Now), WithExpiryEvents(), WithShards(2))
			if err != nil {
				t.Fatal(err)
			}
			sweepers = append(sweepers, newSweeper(t, si))
		}
		for range 50 {
			clk.Advance(time.Second)
			var wg sync.WaitGroup
			errs := make(chan error, len(sweepers))
			for _, w := range sweepers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := w.SweepOnce(ctx); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		}
		sameTimes(t, "ticks", ticksOf(t, s, "beat"), secondsAfter(base, 1, 50))
	})
}

// TestScheduleCatchUp stops sweeping an @every 1s schedule after 3 ticks,
// then sweeps again 10.5 s later, and 100.5 s later (past the ticks one
// list holds): the ticks missed fire as WithCatchUp says, and the ones
// after as usual.
func TestScheduleCatchUp(t *testing.T) {
	noLeaks(t)
	for _, gap := range []int{10, 100} {
		for _, c := range []struct {
			n      int
			missed func(from, to int) (int, int) // the missed ticks that fire, as k range
		}{
			{1, func(from, to int) (int, int) { return to, to }},
			{-1, func(from, to int) (int, int) { return from, to }},
			{0, func(from, to int) (int, int) { return 1, 0 }},
		} {
			t.Run(fmt.Sprintf("gap%d/catchup%d", gap, c.n), func(t *testing.T) {
				eachBackend(t, func(t *testing.T, b backend) {
					ctx := context.Background()
					s, clk := newTestSet(t, b, WithExpiryEvents(), WithShards(1))
					base := clk.Now()
					if _, err := s.PutSchedule(ctx, "beat", "@every 1s", WithCatchUp(c.n)); err != nil {
						t.Fatal(err)
					}
					w := newSweeper(t, s, WithLeaseTTL(100*time.Millisecond)) // grace 200ms
					sweep := func() {
						t.Helper()
						if _, err := w.SweepOnce(ctx); err != nil {
							t.Fatal(err)
						}
					}
					for range 3 {
						clk.Advance(time.Second)
						sweep()
					}
					// Nothing sweeps for gap+0.5 s: ticks 4..3+gap are missed.
					clk.Advance(time.Duration(gap)*time.Second + 500*time.Millisecond)
					sweep()
					clk.Advance(500 * time.Millisecond) // tick 4+gap, in time
					sweep()
					want := secondsAfter(base, 1, 3)
					from, to := c.missed(4, 3+gap)
					want = append(want, secondsAfter(base, from, to)...)
					want = append(want, base.Add(time.Duration(4+gap)*time.Second))
					sameTimes(t, "ticks", ticksOf(t, s, "beat"), want)
				})
			})
		}
	}
}

// TestScheduleCronAcrossDST runs cron specs in New York across the spring
// and autumn changes of 2026, hour by hour on the set's clock: the ticks
// are the parser's.
func TestScheduleCronAcrossDST(t *testing.T) {
	noLeaks(t)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec  string
		start time.Time
	}{
		{"CRON_TZ=America/New_York 30 2 * * *", time.Date(2026, 3, 6, 12, 0, 0, 0, ny)},   // 2:30 does not exist on March 8
		{"CRON_TZ=America/New_York 30 1 * * *", time.Date(2026, 10, 30, 12, 0, 0, 0, ny)}, // 1:30 comes twice on November 1
		{"CRON_TZ=America/New_York 0 * * * *", time.Date(2026, 3, 7, 22, 0, 0, 0, ny)},
	} {
		t.Run(c.spec[len("CRON_TZ=America/New_York "):], func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b backend) {
				ctx := context.Background()
				s, clk := newTestSet(t, b, WithExpiryEvents(), WithShards(1))
				clk.Advance(c.start.Sub(clk.Now()))
				if _, err := s.PutSchedule(ctx, "tz", c.spec, WithCatchUp(-1)); err != nil {
					t.Fatal(err)
				}
				w := newSweeper(t, s)
				end := c.start.Add(4 * 24 * time.Hour)
				for clk.Now().Before(end) {
					clk.Advance(time.Hour)
					if _, err := w.SweepOnce(ctx); err != nil {
						t.Fatal(err)
					}
				}
				sc, err := cron.ParseStandard(c.spec)
				if err != nil {
					t.Fatal(err)
				}
				var want []time.Time
				for tk := sc.Next(c.start); !tk.After(clk.Now()); tk = sc.Next(tk) {
					want = append(want, tk)
				}
				if len(want) < 3 {
					t.Fatalf("the parser gives %d ticks", len(want))
				}
				sameTimes(t, "ticks", ticksOf(t, s, "tz"), want)
			})
		})
	}
}

// TestScheduleChangePauseRemove changes a schedule's spec (it applies from
// the next tick), pauses it (no tick fires, none is caught up), resumes it
// and removes it (it fires no more), on a set with payloads beside it.
func TestScheduleChangePauseRemove(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithShards(2), WithPayloadStorage())
		// Members expiring beside the schedule, with payloads.
		for i := range 5 {
			if _, err := s.Add(ctx, "o"+itoa(int64(i)), "m", time.Duration(i+1)*time.Second, WithPayload([]byte("p"))); err != nil {
				t.Fatal(err)
			}
		}
		base := clk.Now()
		w := newSweeper(t, s)
		step := func(n int) {
			t.Helper()
			for range n {
				clk.Advance(time.Second)
				if _, err := w.SweepOnce(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := s.PutSchedule(ctx, "job", "@every 1s"); err != nil {
			t.Fatal(err)
		}
		step(3) // 1, 2, 3
		next, err := s.PutSchedule(ctx, "job", "@every 5s")
		if err != nil {
			t.Fatal(err)
		}
		if !next.Equal(base.Add(8 * time.Second)) {
			t.Fatalf("next after the change %v, want %v", next, base.Add(8*time.Second))
		}
		step(10) // 8, 13
		if err := s.PauseSchedule(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		ls, _ := s.Schedules(ctx)
		if len(ls) != 1 || !ls[0].Paused || !ls[0].Next.IsZero() || !ls[0].Last.Equal(base.Add(13*time.Second)) {
			t.Fatalf("paused: %+v", ls)
		}
		if next, err := s.PutSchedule(ctx, "job", "@every 2s"); err != nil || !next.IsZero() {
			t.Fatalf("put of a paused schedule: %v, %v (want it kept paused)", next, err)
		}
		step(10) // none
		next, err = s.ResumeSchedule(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if !next.Equal(base.Add(25 * time.Second)) {
			t.Fatalf("next after resume %v, want %v", next, base.Add(25*time.Second))
		}
		step(4) // 25, 27
		if ok, err := s.RemoveSchedule(ctx, "job"); err != nil || !ok {
			t.Fatalf("remove: %v, %v", ok, err)
		}
		step(5)
		want := secondsAfter(base, 1, 3)
		for _, k := range []int{8, 13, 25, 27} {
			want = append(want, base.Add(time.Duration(k)*time.Second))
		}
		sameTimes(t, "ticks", ticksOf(t, s, "job"), want)
		members := 0
		for shard := range s.Shards() {
			es, _, err := s.ReadEvents(ctx, shard, "0", 1000, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if !e.Tick && e.Member == "m" && string(e.Payload) == "p" {
					members++
				}
			}
		}
		if members != 5 {
			t.Fatalf("%d members' events with their payloads, want 5", members)
		}
		if ls, err := s.Schedules(ctx); err != nil || len(ls) != 0 {
			t.Fatalf("after remove: %+v, %v", ls, err)
		}
		if ok, err := s.RemoveSchedule(ctx, "job"); err != nil || ok {
			t.Fatalf("second remove: %v, %v", ok, err)
		}
		if err := s.PauseSchedule(ctx, "job"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("pause of a removed schedule: %v", err)
		}
		if _, err := s.ResumeSchedule(ctx, "job"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("resume of a removed schedule: %v", err)
		}
	})
}

// TestScheduleRefusesBadInput: a bad ID, spec or option, or a set without
// events, gets ErrInvalidArgument naming it, and nothing is written.
func TestScheduleRefusesBadInput(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithExpiryEvents())
		before := snapshot(t, b.rdb, s.name)
		long := string(make([]byte, maxMemberLen+1))
		for _, c := range []struct {
			id, spec string
			opts     []ScheduleOption
			says     string
		}{
			{"", "@every 1s", nil, "schedule ID"},
			{long, "@every 1s", nil, "schedule ID"},
			{"a", "", nil, "spec"},
			{"a", "61 * * * *", nil, "61 * * * *"},
			{"a", "* * * *", nil, "5 fields"},
			{"a", "@every nope", nil, "@every nope"},
			{"a", "CRON_TZ=Mars/Olympus 0 * * * *", nil, "Mars/Olympus"},
			{"a", "0 0 30 2 *", nil, "never fires"},
			{"a", "@every 1s", []ScheduleOption{WithCatchUp(-2)}, "WithCatchUp"},
			{"a", "@every 1s", []ScheduleOption{WithPayload(make([]byte, maxPayloadLen+1))}, "payload"},
		} {
			_, err := s.PutSchedule(ctx, c.id, c.spec, c.opts...)
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("PutSchedule(%.10q, %q): %v, want ErrInvalidArgument naming %q", c.id, c.spec, err, c.says)
			}
		}
		if _, err := s.RemoveSchedule(ctx, ""); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("RemoveSchedule(\"\"): %v", err)
		}
		if !reflect.DeepEqual(before, snapshot(t, b.rdb, s.name)) {
			t.Fatal("a refused call wrote")
		}
		plain, _ := newTestSet(t, b)
		if _, err := plain.PutSchedule(ctx, "a", "@every 1s"); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "WithExpiryEvents") {
			t.Fatalf("set without events: %v", err)
		}
	})
}

// TestScheduleCatchUpModel sweeps @every schedules at random moments (gaps
// from none to a minute, past the ticks one list holds and the grace) and
// compares the ticks written with a model of the rule: at each sweep, of
// the ticks come due since the last one, those at most the grace late
// fire, and of the older ones the latest n (all with -1).
func TestScheduleCatchUpModel(t *testing.T) {
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		seed := time.Now().UnixNano()
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		t.Logf("seed %d", seed)
		for round := range 4 {
			s, clk := newTestSet(t, b, WithExpiryEvents(), WithShards(1))
			every := time.Duration(1+rng.IntN(3)) * time.Second
			n := rng.IntN(4) - 1
			lease := time.Duration(100+rng.IntN(3000)) * time.Millisecond
			grace := 2 * lease
			base := clk.Now()
			if _, err := s.PutSchedule(ctx, "m", "@every "+every.String(), WithCatchUp(n)); err != nil {
				t.Fatal(err)
			}
			w := newSweeper(t, s, WithLeaseTTL(lease))
			var want []time.Time
			next := base.Add(every) // the first tick not yet come due
			for range 30 {
				clk.Advance(time.Duration(rng.IntN(60_000)) * time.Millisecond)
				if _, err := w.SweepOnce(ctx); err != nil {
					t.Fatal(err)
				}
				now := clk.Now()
				var missed []time.Time
				for ; !next.After(now); next = next.Add(every) {
					if now.Sub(next) > grace {
						missed = append(missed, next)
					} else {
						if n >= 0 && len(missed) > n {
							missed = missed[len(missed)-n:]
						}
						want = append(want, missed...)
						missed = nil
						want = append(want, next)
					}
				}
				if n >= 0 && len(missed) > n {
					missed = missed[len(missed)-n:]
				}
				want = append(want, missed...)
			}
			t.Logf("round %d: every %v, catch-up %d, grace %v: %d ticks", round, every, n, grace, len(want))
			sameTimes(t, fmt.Sprintf("round %d", round), ticksOf(t, s, "m"), want)
		}
	})
}
