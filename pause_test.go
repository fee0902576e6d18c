package expset

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// pauseLoad records a handler's calls: each event's attempts, the calls
// per owner, and the calls of members the test holds paused (violated).
type pauseLoad struct {
	mu       sync.Mutex
	calls    map[string][]int // event key -> attempts
	owners   map[string]int   // owner -> calls
	held     map[string]bool  // members added while their group or owner is paused, until resumed
	violated []string
}

func (l *pauseLoad) handle(_ context.Context, e Expiry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[e.Member] {
		l.violated = append(l.violated, e.Owner+"/"+e.Member)
	}
	l.calls[eventKey(e)] = append(l.calls[eventKey(e)], e.Attempt)
	l.owners[e.Owner]++
	return nil
}

// hold marks members as held paused (held true) or no longer (false).
func (l *pauseLoad) hold(held bool, members []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range members {
		l.held[m] = held
	}
}

func (l *pauseLoad) ownerCalls(o string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owners[o]
}

func (l *pauseLoad) events() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// TestPauseGroupAndOwner: while a group is paused, no handler call begins
// (the consumer asks again and again, and is refused: the begins counted
// by OnCall), and after Resume every event held back is handled, at
// attempt 1; while one owner is paused in the group, the other owners'
// events are handled and none of its own, until its Resume. Pause and
// Resume report whether they changed anything.
func TestPauseGroupAndOwner(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		var begins atomic.Int64
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithHooks(Hooks{OnCall: func(_ context.Context, ci CallInfo) {
			if ci.Op == "begin" {
				begins.Add(1)
			}
		}}))
		l := &pauseLoad{calls: map[string][]int{}, owners: map[string]int{}, held: map[string]bool{}}
		stop := consumeInBackground(t, s, "g", "c", l.handle, WithConcurrency(4), WithPollInterval(5*time.Millisecond))
		defer stop()
		// add adds n members of owner, due at once, held paused when held.
		add := func(owner string, n int, held bool) []string {
			t.Helper()
			var ms []string
			for i := range n {
				ms = append(ms, owner+strconv.Itoa(i)+"-"+strconv.FormatInt(clk.Now().UnixNano(), 36))
			}
			l.hold(held, ms)
			for _, m := range ms {
				must[time.Time](t)(s.Add(ctx, owner, m, time.Second))
			}
			clk.Advance(time.Second)
			return ms
		}
		handled := func(n int) func() bool {
			return func() bool { return l.events() == n && drained(s) }
		}
		add("a", 3, false)
		waitFor(t, "the first events handled", handled(3))

		if ok, err := s.Pause(ctx, "g", ""); err != nil || !ok {
			t.Fatalf("Pause: %v %v, want true", ok, err)
		}
		if ok, err := s.Pause(ctx, "g", ""); err != nil || ok {
			t.Fatalf("Pause again: %v %v, want false", ok, err)
		}
		held := append(add("a", 5, true), add("b", 5, true)...)
		from := begins.Load()
		waitFor(t, "three refused begins", func() bool { return begins.Load() >= from+3 })
		l.hold(false, held)
		if ok, err := s.Resume(ctx, "g", ""); err != nil || !ok {
			t.Fatalf("Resume: %v %v, want true", ok, err)
		}
		waitFor(t, "every event held back handled", handled(13))

		// One owner paused: the others go on.
		if ok, err := s.Pause(ctx, "g", "a"); err != nil || !ok {
			t.Fatalf("Pause owner a: %v %v, want true", ok, err)
		}
		before := l.ownerCalls("b")
		held = add("a", 4, true)
		add("b", 4, false)
		waitFor(t, "owner b's events handled", func() bool { return l.ownerCalls("b") == before+4 })
		from = begins.Load()
		waitFor(t, "three more begins", func() bool { return begins.Load() >= from+3 })
		l.hold(false, held)
		if ok, err := s.Resume(ctx, "g", "a"); err != nil || !ok {
			t.Fatalf("Resume owner a: %v %v, want true", ok, err)
		}
		if ok, err := s.Resume(ctx, "g", "a"); err != nil || ok {
			t.Fatalf("Resume owner a again: %v %v, want false", ok, err)
		}
		waitFor(t, "owner a's events handled", handled(21))

		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.violated) > 0 {
			t.Errorf("calls begun while paused: %v", l.violated)
		}
		for k, as := range l.calls {
			if len(as) != 1 || as[0] != 1 {
				t.Errorf("event %s: attempts %v, want [1]", k, as)
			}
		}
	})
}

// TestPauseReserve: a Reserve of a paused group gets nothing, charging
// nothing; after Resume it gets the event at attempt 1.
func TestPauseReserve(t *testing.T) {
	t.Parallel()
	noLeaks(t)
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithPayloadStorage())
		if _, err := s.Pause(ctx, "g", ""); err != nil {
			t.Fatal(err)
		}
		expire(t, s, clk, 1)
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		opts := []ReserveOption{WithPollInterval(5 * time.Millisecond), WithLeaseTTL(time.Second)}
		if r, err := s.Reserve(short, "g", "c", opts...); err == nil {
			t.Fatalf("Reserve of a paused group: %+v", r.Expiry)
		}
		if _, err := s.Resume(ctx, "g", ""); err != nil {
			t.Fatal(err)
		}
		long, cancel2 := context.WithTimeout(ctx, 30*time.Second)
		defer cancel2()
		r, err := s.Reserve(long, "g", "c", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if r.Expiry.Attempt != 1 {
			t.Errorf("attempt %d after the pause, want 1", r.Expiry.Attempt)
		}
		if err := r.Finish(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPauseRefusesBadInput: a bad group or owner is refused with
// ErrInvalidArgument, and changes nothing.
func TestPauseRefusesBadInput(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	b := backend{name: "miniredis", rdb: redis.NewClient(&redis.Options{Addr: mr.Addr()}), mr: mr}
	t.Cleanup(func() { _ = b.rdb.Close() })
	ctx := context.Background()
	s, _ := newTestSet(t, b, WithExpiryEvents())
	for _, c := range []struct{ group, owner string }{{"", ""}, {string(make([]byte, maxConsumerLen+1)), ""}, {"g", jobOwnerPrefix + "1"}, {"g", string(make([]byte, maxOwnerLen+1))}} {
		for _, f := range []func(context.Context, string, string) (bool, error){s.Pause, s.Resume} {
			if _, err := f(ctx, c.group, c.owner); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("group %q owner %q: %v, want ErrInvalidArgument", c.group, c.owner, err)
			}
		}
	}
	plain, _ := newTestSet(t, b)
	if _, err := plain.Pause(ctx, "g", ""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a set without events: %v, want ErrInvalidArgument", err)
	}
}

// TestPauseShownAndRemoved: Groups shows a group paused and the owners
// paused in it; RemoveGroup takes the group's own pause with it, so a
// group made again under the name is not paused, but its owner still
// paused is, until resumed, and listed meanwhile on no shard; a group
// paused before it is made is listed until resumed.
func TestPauseShownAndRemoved(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(2), WithExpiryEvents(), WithConsumerGroups("g"))
		info := func() GroupInfo {
			t.Helper()
			gs, err := s.Groups(ctx)
			if err != nil || len(gs) != 1 {
				t.Fatalf("Groups: %+v %v", gs, err)
			}
			return gs[0]
		}
		for _, owner := range []string{"", "a", "b"} {
			if _, err := s.Pause(ctx, "g", owner); err != nil {
				t.Fatal(err)
			}
		}
		if g := info(); !g.Paused || g.PausedOwners != 2 {
			t.Fatalf("after pausing the group and two owners: %+v", g)
		}
		if _, err := s.Resume(ctx, "g", "a"); err != nil {
			t.Fatal(err)
		}
		if g := info(); !g.Paused || g.PausedOwners != 1 {
			t.Fatalf("after resuming one owner: %+v", g)
		}
		if _, err := s.RemoveGroup(ctx, "g"); err != nil {
			t.Fatal(err)
		}
		if g := info(); g != (GroupInfo{Name: "g", PausedOwners: 1}) {
			t.Fatalf("removed with owner b paused: %+v, want listed on no shard with one owner paused", g)
		}
		if _, err := Open(ctx, b.rdb, s.Name(), WithShards(2), WithExpiryEvents(), WithConsumerGroups("g")); err != nil {
			t.Fatal(err)
		}
		if g := info(); g.Paused || g.PausedOwners != 1 {
			t.Fatalf("the group made again: %+v, want not paused, owner b paused", g)
		}
		if ok, err := s.Resume(ctx, "g", "b"); err != nil || !ok {
			t.Fatalf("Resume owner b: %v %v", ok, err)
		}
		if g := info(); g.Paused || g.PausedOwners != 0 {
			t.Fatalf("owner b resumed: %+v", g)
		}

		// A group paused before any Consume makes it is listed, on no shard.
		if ok, err := s.Pause(ctx, "later", ""); err != nil || !ok {
			t.Fatalf("Pause of a group not made: %v %v", ok, err)
		}
		gs, err := s.Groups(ctx)
		if err != nil || len(gs) != 2 || gs[0].Name != "g" || gs[0].Shards != 2 || gs[0].Paused || gs[1] != (GroupInfo{Name: "later", Paused: true}) {
			t.Fatalf("Groups with %q paused before it is made: %+v %v", "later", gs, err)
		}
		if _, err := s.Resume(ctx, "later", ""); err != nil {
			t.Fatal(err)
		}
		if g := info(); g.Name != "g" {
			t.Fatalf("after resuming %q: %+v", "later", g)
		}
	})
}

// TestPausedOwners: PausedOwners lists the owners paused in each group,
// sorted by their bytes, from every shard, and not the group's own pause;
// a Resume takes one out; a group whose name holds glob characters lists
// its own owners only, not those of a group its name would match as a
// pattern; RemoveGroup leaves the owners paused, and listed; bad input is
// refused with ErrInvalidArgument and changes nothing.
func TestPausedOwners(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(4), WithExpiryEvents(), WithConsumerGroups("g", "h"))
		list := func(group string, want ...string) {
			t.Helper()
			got, err := s.PausedOwners(ctx, group)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("PausedOwners(%q) = %q, %v; want %q", group, got, err, want)
			}
		}
		pause := func(group string, owners ...string) {
			t.Helper()
			for _, o := range owners {
				if _, err := s.Pause(ctx, group, o); err != nil {
					t.Fatal(err)
				}
			}
		}
		list("g")
		g := []string{"o7", "o1", "user 3", "\xff\x00bin", "o10", "o2"}
		h := []string{"o2", "o9"}
		pause("g", append(g, "")...) // "": the whole group, not an owner
		pause("h", h...)
		shards := map[int]bool{}
		for _, o := range g {
			shards[s.ShardOf(o)] = true
		}
		if len(shards) < 2 {
			t.Fatalf("the owners of g lie on %d shard: want several", len(shards))
		}
		slices.Sort(g)
		list("g", g...)
		list("h", h...)
		if gs, err := s.Groups(ctx); err != nil || len(gs) != 2 || gs[0].PausedOwners != int64(len(g)) || gs[1].PausedOwners != int64(len(h)) {
			t.Fatalf("Groups: %+v, %v; want %d and %d owners paused", gs, err, len(g), len(h))
		}

		if _, err := s.Resume(ctx, "g", "o2"); err != nil {
			t.Fatal(err)
		}
		g = slices.DeleteFunc(g, func(o string) bool { return o == "o2" })
		list("g", g...)
		list("h", h...)

		// Each name matches the other as a pattern, unescaped.
		for _, pair := range [][2]string{{"g*", "gx"}, {"g?", "gy"}, {"[gh]", "gabc"}, {`a\b`, "abc"}} {
			for _, group := range pair {
				pause(group, "shared", "own-"+group)
			}
		}
		for _, group := range []string{"g*", "gx", "g?", "gy", "[gh]", "gabc", `a\b`, "abc"} {
			list(group, "own-"+group, "shared")
		}

		if _, err := s.RemoveGroup(ctx, "g"); err != nil {
			t.Fatal(err)
		}
		list("g", g...)

		before := snapshot(t, b.rdb, s.Name())
		for _, group := range []string{"", strings.Repeat("g", maxConsumerLen+1)} {
			if got, err := s.PausedOwners(ctx, group); !errors.Is(err, ErrInvalidArgument) || got != nil {
				t.Errorf("PausedOwners(%.10q...): %q, %v; want ErrInvalidArgument", group, got, err)
			}
		}
		plain, _ := newTestSet(t, b)
		if _, err := plain.PausedOwners(ctx, "g"); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("a set without events: %v, want ErrInvalidArgument", err)
		}
		if _, err := (&Set{}).PausedOwners(ctx, "g"); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("a zero Set: %v, want ErrInvalidArgument", err)
		}
		if after := snapshot(t, b.rdb, s.Name()); !maps.Equal(before, after) {
			t.Errorf("the refused calls changed the set:\nbefore %v\nafter  %v", before, after)
		}
	})
}
