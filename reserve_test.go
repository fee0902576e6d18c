package expset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// reserve calls s.Reserve, failing t after 30s without an event (a test
// that hangs otherwise; no timing is asserted).
// reserveOpts returns opts as Reserve takes them: each must be a
// ReserveOption too (WithLeaseTTL, WithPollInterval, WithMaxAttempts,
// WithRetryBackoff), as the options a test shares between Consume and
// Reserve are.
func reserveOpts(opts []ConsumeOption) []ReserveOption {
	out := make([]ReserveOption, len(opts))
	for i, o := range opts {
		out[i] = o.(ReserveOption)
	}
	return out
}

// TestReserveOptionsCompile: the options that shape Consume's handler calls
// are not ReserveOptions (a Reserve given one does not compile); those
// both take are both.
func TestReserveOptionsCompile(t *testing.T) {
	for name, o := range map[string]ConsumeOption{
		"WithReadBatch": WithReadBatch(1), "WithMaxHandlingTime": WithMaxHandlingTime(time.Second),
		"WithConcurrency": WithConcurrency(1), "WithOwnerConcurrency": WithOwnerConcurrency(1),
		"WithGroupConcurrency": WithGroupConcurrency(1),
		"WithShutdownTimeout":  WithShutdownTimeout(time.Second),
	} {
		if _, ok := o.(ReserveOption); ok {
			t.Errorf("%s is a ReserveOption: Reserve's caller makes the calls it shapes", name)
		}
	}
	for name, o := range map[string]ConsumeOption{
		"WithLeaseTTL": WithLeaseTTL(time.Second), "WithPollInterval": WithPollInterval(time.Second),
		"WithMaxAttempts": WithMaxAttempts(1), "WithRetryBackoff": WithRetryBackoff(0, 0),
	} {
		if _, ok := o.(ReserveOption); !ok {
			t.Errorf("%s is not a ReserveOption", name)
		}
	}
}

func reserve(t *testing.T, s *Set, consumer string, opts ...ConsumeOption) *Reservation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := s.Reserve(ctx, "g", consumer, reserveOpts(opts)...)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return r
}

// TestReserveFinish: Finish(nil) acknowledges, RetryAfter brings the event
// back with attempt+1, Bury dead-letters it at once; misuse of a
// Reservation is an error, never a panic.
func TestReserveFinish(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 3)
		opts := []ConsumeOption{WithLeaseTTL(time.Minute), WithPollInterval(10 * time.Millisecond)}
		attempts := map[string][]int{}
		for range 4 {
			r := reserve(t, s, "c", opts...)
			e := r.Expiry
			attempts[e.Owner] = append(attempts[e.Owner], e.Attempt)
			if string(e.Payload) != "p"+e.Owner[1:] {
				t.Errorf("%s: payload %q", e.Owner, e.Payload)
			}
			var err error
			switch {
			case e.Owner == "o1":
				err = Bury(errors.New("malformed"))
			case e.Owner == "o2" && e.Attempt == 1:
				err = RetryAfter(errors.New("busy"), 50*time.Millisecond)
			}
			if err := r.Finish(ctx, err); err != nil {
				t.Fatalf("Finish: %v", err)
			}
			if err := r.Finish(ctx, nil); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("second Finish: %v, want ErrInvalidArgument", err)
			}
			if err := r.Touch(ctx); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("Touch after Finish: %v, want ErrInvalidArgument", err)
			}
		}
		want := map[string][]int{"o0": {1}, "o1": {1}, "o2": {1, 2}}
		if fmt.Sprint(attempts) != fmt.Sprint(want) {
			t.Errorf("attempts %v, want %v", attempts, want)
		}
		dead := deadKeys(t, s)
		if len(dead) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dead))
		}
		for _, d := range dead {
			if d.Event.Owner != "o1" || d.Event.Attempt != 1 || d.Error != "malformed" {
				t.Errorf("dead letter %+v, want o1 after 1 attempt, malformed", d)
			}
		}
		waitFor(t, "the stream drained", func() bool { return drained(s) })
		// Nothing left: Reserve waits until its context ends.
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if r, err := s.Reserve(cctx, "g", "c", reserveOpts(opts)...); r != nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Reserve with nothing to reserve: %v, %v; want nil, DeadlineExceeded", r, err)
		}
	})
}

// TestReserveLeaseLapse: Touch keeps a reservation from everyone else; one
// left untouched past the lease TTL goes to another consumer with the next
// attempt, the first one's Touch then says ErrLeaseLost, and a last attempt
// that lapses is dead-lettered.
func TestReserveLeaseLapse(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		expire(t, s, clk, 1)
		lease := 600 * time.Millisecond
		opts := []ConsumeOption{WithLeaseTTL(lease), WithMaxAttempts(3), WithPollInterval(10 * time.Millisecond)}
		r1 := reserve(t, s, "c1", opts...)
		if r1.Expiry.Attempt != 1 {
			t.Fatalf("attempt %d, want 1", r1.Expiry.Attempt)
		}
		other := make(chan *Reservation, 1)
		octx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := s.Reserve(octx, "g", "c2", reserveOpts(opts)...)
			other <- r
		}()
		// Touched for three lease TTLs: c2 gets nothing meanwhile.
		for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 6) {
			if err := r1.Touch(ctx); err != nil {
				t.Fatalf("Touch: %v", err)
			}
		}
		select {
		case r := <-other:
			t.Fatalf("c2 reserved %+v while c1 touched it", r)
		default:
		}
		// Left alone, it lapses and goes to c2 with attempt 2.
		var r2 *Reservation
		select {
		case r2 = <-other:
		case <-time.After(30 * time.Second):
			t.Fatal("the lapsed reservation never came back")
		}
		stop()
		wg.Wait()
		if r2 == nil || r2.Expiry.Attempt != 2 || r2.Expiry.ID != r1.Expiry.ID {
			t.Fatalf("c2 reserved %+v, want %s with attempt 2", r2, r1.Expiry.ID)
		}
		if err := r1.Touch(ctx); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("Touch of the lapsed reservation: %v, want ErrLeaseLost", err)
		}
		if err := r1.Finish(ctx, errors.New("late")); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("late Finish: %v, want ErrLeaseLost", err)
		}
		// Nor did the late failure take it from c2.
		if err := r2.Touch(ctx); err != nil {
			t.Errorf("c2's Touch after c1's late Finish: %v", err)
		}
		// The third and last attempt goes to Consume, and never returns.
		r2.mu.Lock()
		r2.done = true // forget it, as a dying caller would
		r2.mu.Unlock()
		got := make(chan Expiry, 3)
		cctx, cstop := context.WithCancel(ctx)
		var cwg sync.WaitGroup
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			_ = s.Consume(cctx, "g", "c3", func(hctx context.Context, e Expiry) error {
				got <- e
				return errors.New("fails")
			}, opts...)
		}()
		var e3 Expiry
		select {
		case e3 = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("Consume never got the lapsed reservation")
		}
		waitFor(t, "a dead letter", func() bool { return len(deadKeys(t, s)) == 1 })
		cstop()
		cwg.Wait()
		if e3.Attempt != 3 {
			t.Errorf("Consume saw attempt %d, want 3", e3.Attempt)
		}
		for _, d := range deadKeys(t, s) {
			if d.Event.Attempt != 3 {
				t.Errorf("dead letter after %d attempts, want 3", d.Event.Attempt)
			}
		}
	})
}

// TestReserveWithConsume: Reserve loops and a Consume on one group never
// hold one event at once, and every event is done once with exact attempts.
func TestReserveWithConsume(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		s, opts := firstFailsSet(t, b)
		var (
			mu         sync.Mutex
			inFlight   = map[string]bool{}
			violations int
			done       = map[string][]int{}
		)
		work := func(e Expiry) error {
			mu.Lock()
			if inFlight[e.Owner] {
				violations++
			}
			inFlight[e.Owner] = true
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			delete(inFlight, e.Owner)
			done[e.Owner] = append(done[e.Owner], e.Attempt)
			return firstFails(e)
		}
		var wg sync.WaitGroup
		for _, name := range []string{"r1", "r2"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					r, err := s.Reserve(ctx, "g", name, reserveOpts(opts)...)
					if err != nil {
						return
					}
					if err := r.Finish(ctx, work(r.Expiry)); err != nil {
						t.Errorf("Finish: %v", err)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Consume(ctx, "g", "c", func(_ context.Context, e Expiry) error { return work(e) }, opts...)
		}()
		waitFor(t, "every event done", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(done) == firstFailsEvents
		})
		waitFor(t, "the stream drained", func() bool { return drained(s) })
		stop()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if violations != 0 {
			t.Errorf("%d times an event was held twice at once", violations)
		}
		checkFirstFails(t, done)
	})
}

// firstFails is the work of the tests whose every event is done once
// with exact attempts: the first attempt at the event of an owner ending
// in 3 fails, every other attempt succeeds.
func firstFails(e Expiry) error {
	if e.Attempt == 1 && strings.HasSuffix(e.Owner, "3") {
		return errors.New("first attempt fails")
	}
	return nil
}

// firstFailsEvents is how many events firstFailsSet gives.
const firstFailsEvents = 40

// firstFailsSet opens a set of 4 shards with 40 events, and returns it
// with the options the tests of firstFails reserve and consume with.
func firstFailsSet(t *testing.T, b backend) (*Set, []ConsumeOption) {
	t.Helper()
	s, clk := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithPayloadStorage())
	expire(t, s, clk, firstFailsEvents)
	return s, []ConsumeOption{WithLeaseTTL(time.Minute), WithPollInterval(10 * time.Millisecond), WithRetryBackoff(time.Millisecond, time.Millisecond)}
}

// checkFirstFails checks the attempts done of each owner's event under
// firstFails: [1], or [1 2] for an owner ending in 3.
func checkFirstFails(t *testing.T, done map[string][]int) {
	t.Helper()
	for o, as := range done {
		want := "[1]"
		if strings.HasSuffix(o, "3") {
			want = "[1 2]"
		}
		if fmt.Sprint(as) != want {
			t.Errorf("%s: attempts %v, want %s", o, as, want)
		}
	}
}

// reserveHostileRows adds Reserve's and Reservation's rows to the
// hostile-input table.
func reserveHostileRows(row func(call, input string, want error, got string, run func(e *hostileEnv) (string, error))) {
	ended := func(e *hostileEnv, group, consumer string, opts ...ReserveOption) error {
		s, err := Open(context.Background(), e.rdb, e.named("reserve"), WithExpiryEvents())
		if err != nil {
			return err
		}
		done, cancel := context.WithCancel(e.ctx)
		cancel()
		_, err = s.Reserve(done, group, consumer, opts...)
		return err
	}
	for _, c := range []struct {
		desc            string
		group, consumer string
		opts            []ReserveOption
		want            error
	}{
		{`group ""`, "", "c", nil, ErrInvalidArgument},
		{"consumer of 257 bytes", "g", strings.Repeat("c", maxConsumerLen+1), nil, ErrInvalidArgument},
		{`consumer "` + retryHolder + `" (reserved)`, "g", retryHolder, nil, ErrInvalidArgument},
		{"WithMaxAttempts(0)", "g", "c", []ReserveOption{WithMaxAttempts(0)}, ErrInvalidArgument},
		{"WithRetryBackoff(-1ns, 1s)", "g", "c", []ReserveOption{WithRetryBackoff(-1, time.Second)}, ErrInvalidArgument},
	} {
		row("Set.Reserve", c.desc, c.want, "", func(e *hostileEnv) (string, error) {
			return "", ended(e, c.group, c.consumer, c.opts...)
		})
	}
	row("Set.Reserve", "an ended context, WithLeaseTTL, WithMaxAttempts, WithRetryBackoff, WithPollInterval", nil, "nil, context canceled", func(e *hostileEnv) (string, error) {
		err := ended(e, "g", "c", WithLeaseTTL(time.Second), WithMaxAttempts(1), WithRetryBackoff(0, 0), WithPollInterval(time.Second))
		return "nil, " + fmt.Sprint(err), nil
	})
	row("Set.Reserve", "a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.s.Reserve(e.ctx, "g", "c")
		return "", err
	})
	for _, z := range []struct {
		desc string
		s    *Set
	}{{"zero Set", &Set{}}, {"nil *Set", nil}} {
		s := z.s
		row("Set.Reserve", z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := s.Reserve(e.ctx, "g", "c")
			return "", err
		})
	}
	for _, z := range []struct {
		desc string
		r    *Reservation
	}{{"zero Reservation", &Reservation{}}, {"nil *Reservation", nil}, {"Reservation finished", &Reservation{c: &consumer{}, done: true}}} {
		r := z.r
		row("Reservation.Finish", z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			return "", r.Finish(e.ctx, nil)
		})
		row("Reservation.Touch", z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			return "", r.Touch(e.ctx)
		})
	}
}

// TestReserveReadsEveryShard: Reserve reads one event at a time, yet finds
// one on the last shard it reads without waiting for a safety poll.
func TestReserveReadsEveryShard(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(16), WithExpiryEvents())
		owner := ""
		for i := 0; owner == ""; i++ {
			if o := fmt.Sprint("o", i); s.ShardOf(o) == 15 {
				owner = o
			}
		}
		must[time.Time](t)(s.Add(ctx, owner, "m", time.Second))
		clk.Advance(time.Second)
		if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != 1 {
			t.Fatalf("sweep: %+v %v", st, err)
		}
		r := reserve(t, s, "c", WithPollInterval(time.Minute))
		if r.Expiry.Owner != owner {
			t.Errorf("reserved %+v, want %s's", r.Expiry, owner)
		}
		if err := r.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReserveSetUpOnce: a loop of Reserve and Finish subscribes to the
// wake-ups once and makes the group once per shard, then reads and begins
// each event in a round trip each (with its acknowledgement, about three);
// the subscription closes once the loop ends; a stream deleted meanwhile is
// made again with the group.
func TestReserveSetUpOnce(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var cmds commandCounter
		rdb := b.client(t)
		rdb.AddHook(&cmds)
		b.rdb = rdb
		const shards, n = 16, 40
		s, clk := newTestSet(t, b, WithShards(shards), WithExpiryEvents(), WithPayloadStorage(), WithConsumerGroups("declared"))
		expire(t, s, clk, n)
		cmds.reset()
		var subs []*subscription
		for i := range n {
			r := reserve(t, s, "c")
			s.reserves.mu.Lock()
			if i == 0 {
				subs = s.reserves.subs
			} else if fmt.Sprint(s.reserves.subs) != fmt.Sprint(subs) {
				t.Errorf("call %d subscribed again", i)
			}
			s.reserves.mu.Unlock()
			if err := r.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				if got := cmds.count("xgroup"); got != 2*shards {
					t.Errorf("first call: %d XGROUP CREATE, want %d (two groups, %d shards)", got, 2*shards, shards)
				}
				cmds.reset()
			}
		}
		if got := cmds.count("xgroup"); got != 0 {
			t.Errorf("%d XGROUP CREATE after the first call, want none", got)
		}
		// Reading the next event, beginning it and acknowledging it, and
		// a few calls besides (a shard read empty, a claim scan).
		if got := cmds.trips(); got > 4*(n-1) {
			t.Errorf("%d round trips for %d Reserve and Finish, want at most %d", got, n-1, 4*(n-1))
		}
		waitFor(t, "the subscription closed", func() bool { return !reserveSubscribed(s) })

		// The streams deleted (DEL, a restart without persistence): the
		// next events come, with the group made again.
		for i := range shards {
			must[int64](t)(b.rdb.Del(ctx, s.shards[i].Events).Result())
		}
		must[time.Time](t)(s.Add(ctx, "late", "m", time.Second))
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		r := reserve(t, s, "c", WithPollInterval(10*time.Millisecond))
		if r.Expiry.Owner != "late" || r.Expiry.Attempt != 1 {
			t.Errorf("reserved %+v, want late's first attempt", r.Expiry)
		}
		// The subscription stays while the reservation is held, then
		// closes.
		time.Sleep(3 * reserveLinger)
		if !reserveSubscribed(s) {
			t.Error("the subscription closed while a reservation was held")
		}
		if err := r.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the subscription closed after Finish", func() bool { return !reserveSubscribed(s) })
	})
}

// reserveSubscribed reports whether s's Reserve wake-up subscription is
// open.
func reserveSubscribed(s *Set) bool {
	s.reserves.mu.Lock()
	defer s.reserves.mu.Unlock()
	return s.reserves.subs != nil
}

// commandCounter is a go-redis hook that counts round trips (a command, or
// a pipeline) and commands by name.
type commandCounter struct {
	mu     sync.Mutex
	byName map[string]int
	n      int
}

func (c *commandCounter) reset() {
	c.mu.Lock()
	c.byName, c.n = map[string]int{}, 0
	c.mu.Unlock()
}

func (c *commandCounter) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byName[name]
}

func (c *commandCounter) trips() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *commandCounter) add(trips int, cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[string]int{}
	}
	c.n += trips
	for _, cmd := range cmds {
		c.byName[cmd.Name()]++
	}
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(1, cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(1, cmds...)
		return next(ctx, cmds)
	}
}

// TestReserveFinishBesideReserve: reservations finished on goroutines of
// their own while the same consumer reserves the next ones (its state is
// kept between calls): every event is done once, with exact attempts.
func TestReserveFinishBesideReserve(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		s, opts := firstFailsSet(t, b)
		var (
			mu   sync.Mutex
			done = map[string][]int{}
			wg   sync.WaitGroup
		)
		slots := make(chan struct{}, 4)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				slots <- struct{}{}
				r, err := s.Reserve(ctx, "g", "c", reserveOpts(opts)...)
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					e := r.Expiry
					mu.Lock()
					done[e.Owner] = append(done[e.Owner], e.Attempt)
					mu.Unlock()
					if err := r.Finish(context.Background(), firstFails(e)); err != nil {
						t.Errorf("Finish: %v", err)
					}
				}()
			}
		}()
		waitFor(t, "the stream drained", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(done) == firstFailsEvents && drained(s)
		})
		stop()
		wg.Wait()
		checkFirstFails(t, done)
	})
}
