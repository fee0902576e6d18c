package expset

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset/internal/store"
)

// runningShape is what a test checks of a listed call beside its times.
type runningShape struct {
	Owner, Member string
	Attempt       int
	Consumer      string
}

// shapes returns the calls' shapes, sorted by owner and member.
func shapes(cs []RunningCall) []runningShape {
	out := make([]runningShape, len(cs))
	for i, c := range cs {
		out[i] = runningShape{c.Owner, c.Member, c.Attempt, c.Consumer}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Owner != out[b].Owner {
			return out[a].Owner < out[b].Owner
		}
		return out[a].Member < out[b].Member
	})
	return out
}

// checkTimes checks that each of cs began in [from, to] (by the set's
// clock), the oldest first, and that its lease ends at most lease after
// now (a lease lapsed: in the past).
func checkTimes(t *testing.T, cs []RunningCall, from, to time.Time, lease time.Duration) {
	t.Helper()
	for i, c := range cs {
		if c.Started.Before(from.Truncate(time.Millisecond)) || c.Started.After(to) {
			t.Errorf("call %d %+v began at %v, want in [%v, %v]", i, c, c.Started, from, to)
		}
		if i > 0 && c.Started.Before(cs[i-1].Started) {
			t.Errorf("call %d began at %v, before call %d's %v: want the oldest first", i, c.Started, i-1, cs[i-1].Started)
		}
		if c.LeaseEnd.IsZero() || c.LeaseEnd.After(time.Now().Add(lease)) {
			t.Errorf("call %d %+v: lease ends %v, want within %v of now", i, c, c.LeaseEnd, lease)
		}
	}
}

// TestRunning: group g's Consume WithOwnerConcurrency(2), whose handler
// calls block until released, runs a's 2 calls (a's third event held
// back), b's 2, c's 1 and a job's; group h's Consume without the cap runs
// all 7. Running lists each call with its owner (none for the job, whose ID
// is the member), attempt, consumer, start and lease end, the oldest
// first, cut at n; Groups gives the totals and the oldest start. Once the
// calls are released, everything falls to zero.
func TestRunning(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithConsumerGroups("g", "h"))
		if got := must[RunningCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, RunningCalls{}) {
			t.Fatalf("Running before any call: %+v, want none", got)
		}
		expireOwned(t, s, clk, []string{"a"}, 3)
		expireOwned(t, s, clk, []string{"b"}, 2)
		expireOwned(t, s, clk, []string{"c"}, 1)
		if _, _, err := s.Put(ctx, "job-1", time.Second); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		must[SweepStats](t)(newSweeper(t, s).SweepOnce(ctx))
		release := make(chan struct{})
		handle := func(ctx context.Context, e Expiry) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		lease := 10 * time.Second
		from := clk.Now()
		stopG := consumeInBackground(t, s, "g", "c1", handle, WithOwnerConcurrency(2), WithConcurrency(8), WithLeaseTTL(lease), WithPollInterval(5*time.Millisecond))
		stopH := consumeInBackground(t, s, "h", "c2", handle, WithConcurrency(8), WithLeaseTTL(lease), WithPollInterval(5*time.Millisecond))
		defer stopG()
		defer stopH()
		var g, h RunningCalls
		waitFor(t, "g's 6 calls running and a's third event held back, h's 7 calls", func() bool {
			g = must[RunningCalls](t)(s.Running(ctx, "g", 100))
			h = must[RunningCalls](t)(s.Running(ctx, "h", 100))
			return g.Running == 6 && g.HeldBack == 1 && h.Running == 7 && h.HeldBack == 0
		})
		to := clk.Now()
		for _, c := range append(g.Calls, h.Calls...) {
			if !c.LeaseEnd.After(time.Now()) {
				t.Errorf("call %+v: its lease has lapsed, want it renewed", c)
			}
		}
		job := runningShape{"", "job-1", 1, "c1"}
		want := []runningShape{job, {"a", "m0", 1, "c1"}, {"a", "m1", 1, "c1"}, {"b", "m0", 1, "c1"}, {"b", "m1", 1, "c1"}, {"c", "m0", 1, "c1"}}
		if got := shapes(g.Calls); len(got) != 6 || got[0] != job || got[3] != want[3] || got[4] != want[4] || got[5] != want[5] ||
			got[1].Owner != "a" || got[2].Owner != "a" || got[1].Member == got[2].Member {
			t.Errorf("Running(g): %+v, want two of a's calls and %+v", got, want)
		}
		if g.Owners != 3 || h.Owners != 3 {
			t.Errorf("owners: g %d, h %d; want 3 each", g.Owners, h.Owners)
		}
		checkTimes(t, g.Calls, from, to, lease)
		checkTimes(t, h.Calls, from, to, lease)
		for _, c := range append(g.Calls, h.Calls...) {
			if strings.Contains(c.Owner, jobOwnerPrefix) || c.Tick {
				t.Errorf("call %+v: want no tick, and no owner of jobs shown", c)
			}
		}
		hs := shapes(h.Calls)
		if len(hs) != 7 || hs[0] != (runningShape{"", "job-1", 1, "c2"}) || hs[1] != (runningShape{"a", "m0", 1, "c2"}) || hs[3] != (runningShape{"a", "m2", 1, "c2"}) {
			t.Errorf("Running(h): %+v, want every event's call, by c2", hs)
		}
		first := must[RunningCalls](t)(s.Running(ctx, "g", 2))
		if first.Running != 6 || first.HeldBack != 1 || len(first.Calls) != 2 || first.Calls[0].ID != g.Calls[0].ID || first.Calls[1].ID != g.Calls[1].ID {
			t.Errorf("Running(g, 2): %+v, want the 2 oldest of %+v", first, g.Calls)
		}
		groups := func() map[string]GroupInfo {
			out := map[string]GroupInfo{}
			for _, g := range must[[]GroupInfo](t)(s.Groups(ctx)) {
				out[g.Name] = g
			}
			return out
		}
		gs := groups()
		if x := gs["g"]; x.Running != 6 || x.RunningOwners != 3 || x.HeldBack != 1 || !x.OldestRunning.Equal(g.Calls[0].Started) {
			t.Errorf("Groups: g %+v, want 6 calls running of 3 owners, 1 held back, the oldest begun at %v", x, g.Calls[0].Started)
		}
		if x := gs["h"]; x.Running != 7 || x.RunningOwners != 3 || x.HeldBack != 0 {
			t.Errorf("Groups: h %+v, want 7 calls running of 3 owners", x)
		}
		close(release)
		waitFor(t, "every event handled and acknowledged", func() bool {
			gs := groups()
			return gs["g"].Pending == 0 && gs["g"].Lag == 0 && gs["h"].Pending == 0 && gs["h"].Lag == 0
		})
		stopG()
		stopH()
		if got := must[RunningCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, RunningCalls{}) {
			t.Errorf("Running after the calls ended: %+v, want none", got)
		}
		if x := groups()["g"]; x.Running != 0 || x.RunningOwners != 0 || x.HeldBack != 0 || !x.OldestRunning.IsZero() {
			t.Errorf("Groups after the calls ended: %+v, want 0 running", x)
		}
	})
}

// TestRunningInput: Running refuses n out of range and an empty group
// (ErrInvalidArgument), a group no shard has (ErrNotFound), and a set
// without expiry events; a group with no call lists none and counts zeros.
func TestRunningInput(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(3), WithExpiryEvents(), WithConsumerGroups("g"))
		for _, c := range []struct {
			group string
			n     int
			want  error
		}{{"g", 0, ErrInvalidArgument}, {"g", maxRunningCalls + 1, ErrInvalidArgument}, {"", 1, ErrInvalidArgument}, {"nope", 1, ErrNotFound}} {
			if _, err := s.Running(ctx, c.group, c.n); !errors.Is(err, c.want) {
				t.Errorf("Running(%q, %d): %v, want %v", c.group, c.n, err, c.want)
			}
		}
		if got, err := s.Running(ctx, "g", maxRunningCalls); err != nil || !reflect.DeepEqual(got, RunningCalls{}) {
			t.Errorf("Running(g): %+v %v, want none", got, err)
		}
		gs := must[[]GroupInfo](t)(s.Groups(ctx))
		if len(gs) != 1 || gs[0] != (GroupInfo{Name: "g", Shards: 3}) {
			t.Errorf("Groups: %+v, want g with zeros", gs)
		}
		plain, _ := newTestSet(t, b)
		if _, err := plain.Running(ctx, "g", 1); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Running on a set without events: %v, want ErrInvalidArgument", err)
		}
	})
}

// TestRunningDeadConsumer: the call of a consumer that died is listed, its
// lease end passing, until a consumer of the group claims its event; the
// event is then held back until that consumer begins its call, which is
// listed then, until its acknowledgement. So with and without an owner
// cap, and the reads change nothing.
func TestRunningDeadConsumer(t *testing.T) {
	t.Parallel()
	for _, ownerCap := range []int{0, 2} {
		t.Run("cap "+strconv.Itoa(ownerCap), func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b backend) {
				ctx := context.Background()
				s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithConsumerGroups("g"))
				expireOwned(t, s, clk, []string{"o"}, 1)
				cfg := defaultConsumeConfig()
				cfg.ownerCap, cfg.leaseTTL = ownerCap, 20*time.Millisecond
				dead := must[*consumer](t)(s.newConsumer("g", "dead", cfg))
				from := clk.Now()
				if got := dead.beginAll(ctx, dead.read(ctx, []int{0}, nil, 10)); len(got) != 1 {
					t.Fatalf("begun: %+v, want the event", got)
				}
				to := clk.Now()
				before := snapshot(t, b.rdb, s.name)
				got := must[RunningCalls](t)(s.Running(ctx, "g", 10))
				if got.Running != 1 || got.Owners != 1 || got.HeldBack != 0 || len(got.Calls) != 1 ||
					shapes(got.Calls)[0] != (runningShape{"o", "m0", 1, "dead"}) || got.Calls[0].Shard != 0 || got.Calls[0].ID == "" {
					t.Fatalf("Running: %+v, want the dead consumer's call of o", got)
				}
				checkTimes(t, got.Calls, from, to, cfg.leaseTTL)
				gs := must[[]GroupInfo](t)(s.Groups(ctx))
				if len(gs) != 1 || gs[0].Running != 1 || gs[0].RunningOwners != 1 || gs[0].HeldBack != 0 || !gs[0].OldestRunning.Equal(got.Calls[0].Started) {
					t.Errorf("Groups: %+v, want 1 call of 1 owner running", gs)
				}
				if after := snapshot(t, b.rdb, s.name); !reflect.DeepEqual(after, before) {
					t.Errorf("the reads changed the keys:\n%v\nto\n%v", before, after)
				}
				live := must[*consumer](t)(s.newConsumer("g", "live", cfg))
				var claimed []delivery
				waitFor(t, "the event claimed", func() bool {
					if b.mr != nil {
						b.mr.FastForward(cfg.leaseTTL)
					}
					claimed, _ = live.claim(ctx, 0, -1)
					return len(claimed) == 1
				})
				if got := must[RunningCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, RunningCalls{HeldBack: 1}) {
					t.Errorf("Running once claimed: %+v, want the event held back", got)
				}
				begun := live.beginAll(ctx, claimed)
				if len(begun) != 1 || begun[0].e.Attempt != 2 {
					t.Fatalf("begun by the claimer: %+v, want attempt 2", begun)
				}
				got = must[RunningCalls](t)(s.Running(ctx, "g", 10))
				if got.Running != 1 || got.HeldBack != 0 || len(got.Calls) != 1 || shapes(got.Calls)[0] != (runningShape{"o", "m0", 2, "live"}) {
					t.Errorf("Running: %+v, want the claimer's call of o", got)
				}
				ack := s.st.AckCall(live.args(), 0, []store.Lease{{ID: begun[0].d.id, Token: begun[0].token}})
				s.st.RunPipelined(ctx, []*store.Call{ack})
				if held, err := store.ReadAck(ack, 1); err != nil || !held[0] {
					t.Fatalf("ack: %v %v", held, err)
				}
				if got := must[RunningCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, RunningCalls{}) {
					t.Errorf("Running once acknowledged: %+v, want none", got)
				}
				if n := b.rdb.HLen(ctx, s.shards[0].Runo).Val(); n != 0 {
					t.Errorf("%d slot counts left", n)
				}
			})
		})
	}
}

// TestRunningHeldBackRetried: a call that failed and waits for its retry
// is not running and not held back (Retrying counts it); once a consumer
// of the same name claims it back and, its owner at the cap, sets it
// aside, it is held back, not shown as its old call.
func TestRunningHeldBackRetried(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithExpiryEvents(), WithConsumerGroups("g"))
		expireOwned(t, s, clk, []string{"o"}, 1)
		cfg := defaultConsumeConfig()
		cfg.ownerCap, cfg.leaseTTL = 1, 20*time.Millisecond
		c := must[*consumer](t)(s.newConsumer("g", "c", cfg))
		begun := c.beginAll(ctx, c.read(ctx, []int{0}, nil, 10))
		if len(begun) != 1 {
			t.Fatalf("begun: %+v, want the event", begun)
		}
		if ok, err := s.st.Retry(ctx, c.args(), 0, store.Lease{ID: begun[0].d.id, Token: begun[0].token}, 0); err != nil || !ok {
			t.Fatalf("retry: %v %v", ok, err)
		}
		if got := must[RunningCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, RunningCalls{}) {
			t.Errorf("Running with the retry waiting: %+v, want none", got)
		}
		// Another call of o holds its one slot.
		putSlot(t, b, s.shards[0], "g", "o")
		var claimed []delivery
		waitFor(t, "the retry claimed", func() bool {
			if b.mr != nil {
				b.mr.FastForward(cfg.leaseTTL)
			}
			claimed, _ = c.claim(ctx, 0, -1)
			return len(claimed) == 1
		})
		if got := c.beginAll(ctx, claimed); len(got) != 0 {
			t.Fatalf("begun at the cap: %+v, want it set aside", got)
		}
		if got := must[RunningCalls](t)(s.Running(ctx, "g", 10)); !reflect.DeepEqual(got, RunningCalls{HeldBack: 1}) {
			t.Errorf("Running with the event set aside: %+v, want it held back", got)
		}
	})
}

// putSlot takes one more owner slot of owner in group, as begins.lua
// does.
func putSlot(t *testing.T, b backend, sk shardKeys, group, owner string) {
	t.Helper()
	first, more := store.SlotFields(group, owner)
	if !must[bool](t)(b.rdb.HSetNX(context.Background(), sk.Runo, first, "1").Result()) {
		must[int64](t)(b.rdb.HIncrBy(context.Background(), sk.Runo, more, 1).Result())
	}
}
