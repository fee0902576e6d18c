package expset

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Kill tests: a sweeper or a consumer in another process, killed with
// SIGKILL at a chosen moment, and what the survivors find afterwards. The
// other process is this test binary run again (os.Args[0]) with only
// TestHelperProcess selected and the role it plays in the environment.

// Environment of a helper process.
const (
	helperRole   = "EXPSET_HELPER_ROLE"   // "sweeper" or "consumer"; unset: TestHelperProcess does nothing
	helperAddrs  = "EXPSET_HELPER_ADDRS"  // comma-separated: one address, or a cluster's nodes
	helperSet    = "EXPSET_HELPER_SET"    // the set's name
	helperShards = "EXPSET_HELPER_SHARDS" // its shard count (it has expiry events and nothing else)
	helperLease  = "EXPSET_HELPER_LEASE"  // sweeper: WithLeaseTTL
	helperVis    = "EXPSET_HELPER_VIS"    // consumer: WithVisibilityTimeout
)

// killWait bounds the waits of the kill tests: they take up to a few
// seconds; the bound only turns a hang into a clear failure.
const killWait = 60 * time.Second

// TestHelperProcess is not a test: run by startHelper in a child process, it
// plays the role named in EXPSET_HELPER_ROLE until it is killed, reporting
// what it does on stdout, one line at a time:
//
//   - sweeper: Sweeper.Run with one owner and two members per batch and a
//     2ms pause after each batch (so the sweep of many owners takes seconds
//     and a kill lands in the middle of it); after each batch it prints
//     "swept <shard> <members swept so far>".
//   - consumer: prints "start <unix ns>", then Consume as consumer "doomed"
//     of group "g", with a handler that prints "got <shard> <event ID>" and
//     then never returns, so the event is never acknowledged.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(helperRole)
	if role == "" {
		return
	}
	if err := helperMain(role); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func helperMain(role string) error {
	addrs := strings.Split(os.Getenv(helperAddrs), ",")
	var rdb redis.UniversalClient
	if len(addrs) == 1 {
		rdb = redis.NewClient(&redis.Options{Addr: addrs[0]})
	} else {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DisableIdentity: true})
	}
	shards, err := strconv.Atoi(os.Getenv(helperShards))
	if err != nil {
		return err
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		fmt.Printf(format+"\n", args...)
		out.Unlock()
	}
	var swept atomic.Int64
	hooks := Hooks{OnSweep: func(si SweepInfo) {
		say("swept %d %d", si.Shard, swept.Add(int64(si.Expired)))
		time.Sleep(2 * time.Millisecond)
	}}
	ctx := context.Background()
	s, err := Open(ctx, rdb, os.Getenv(helperSet), WithShards(shards), WithExpiryEvents(), WithHooks(hooks))
	if err != nil {
		return err
	}
	switch role {
	case "sweeper":
		lease, err := time.ParseDuration(os.Getenv(helperLease))
		if err != nil {
			return err
		}
		return NewSweeper(s, WithLeaseTTL(lease), WithMaxIdle(100*time.Millisecond),
			WithOwnersPerBatch(1), WithMembersPerBatch(2)).Run(ctx)
	case "consumer":
		vis, err := time.ParseDuration(os.Getenv(helperVis))
		if err != nil {
			return err
		}
		say("start %d", time.Now().UnixNano())
		return s.Consume(ctx, "g", "doomed", func(_ context.Context, e Expiry) error {
			say("got %d %s", e.Shard, e.ID)
			time.Sleep(time.Hour) // killed before it returns
			return nil
		}, WithVisibilityTimeout(vis), WithPollInterval(10*time.Millisecond))
	}
	return fmt.Errorf("unknown role %q", role)
}

// helper is a running helper process and what it printed.
type helper struct {
	t      *testing.T
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	part   []byte
	stderr bytes.Buffer
	exited chan struct{}
}

// Write collects the helper's stdout line by line (exec copies into it).
func (h *helper) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.part = append(h.part, p...)
	for {
		i := bytes.IndexByte(h.part, '\n')
		if i < 0 {
			break
		}
		h.lines = append(h.lines, string(h.part[:i]))
		h.part = h.part[i+1:]
	}
	return len(p), nil
}

// startHelper starts this test binary again as a helper playing role (see
// TestHelperProcess), with env added to its environment. It is killed when
// t ends, if it still runs.
func startHelper(t *testing.T, role string, env ...string) *helper {
	t.Helper()
	h := &helper{t: t, exited: make(chan struct{})}
	h.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	h.cmd.Env = append(append(os.Environ(), helperRole+"="+role), env...)
	h.cmd.Stdout, h.cmd.Stderr = h, &h.stderr
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("start helper %s: %v", role, err)
	}
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	t.Cleanup(h.kill)
	return h
}

// waitLine waits for a line for which match returns true and returns it,
// failing t when the helper exits or killWait passes first.
func (h *helper) waitLine(what string, match func(string) bool) string {
	h.t.Helper()
	end := time.Now().Add(killWait)
	for seen := 0; ; {
		h.mu.Lock()
		lines := h.lines[seen:]
		seen = len(h.lines)
		h.mu.Unlock()
		for _, l := range lines {
			if match(l) {
				return l
			}
		}
		select {
		case <-h.exited:
			h.t.Fatalf("helper exited (%v) before %s; stderr:\n%s", h.cmd.ProcessState, what, h.stderr.String())
		default:
		}
		if time.Now().After(end) {
			h.t.Fatalf("no %s from the helper after %v; stderr:\n%s", what, killWait, h.stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// kill sends SIGKILL and waits until the process is gone.
func (h *helper) kill() {
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	<-h.exited
}

// killBackend is a real Redis the kill tests run on, with the addresses a
// helper process connects to.
type killBackend struct {
	name  string
	rdb   redis.UniversalClient
	addrs []string
}

// eachRealBackend runs fn on the shared redis-server and on the shared
// three-master cluster (skipped, or failed with EXPSET_REQUIRE_REDIS=1, when
// redis-server is missing).
func eachRealBackend(t *testing.T, fn func(t *testing.T, b killBackend)) {
	t.Helper()
	t.Run("redis", func(t *testing.T) {
		addr := redistest.Addr(t)
		fn(t, killBackend{name: "redis", rdb: redistest.Client(t), addrs: []string{addr}})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.SharedCluster(t)
		fn(t, killBackend{name: "cluster", rdb: cl.Client(t), addrs: cl.Addrs()})
	})
}

func (b killBackend) env(s *Set) []string {
	return []string{helperAddrs + "=" + strings.Join(b.addrs, ","), helperSet + "=" + s.Name(),
		helperShards + "=" + strconv.Itoa(s.Shards())}
}

// seedExpired gives owners o0..o(owners-1) members m0..m(per-1), each with a
// 1ms ttl (so all have expired a moment later), and returns every member
// with its deadline.
func seedExpired(t *testing.T, s *Set, owners, per int) map[string]map[string]time.Time {
	t.Helper()
	out := make([]map[string]time.Time, owners)
	var wg sync.WaitGroup
	var failed atomic.Value
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < owners; i += 8 {
				out[i] = map[string]time.Time{}
				for j := 0; j < per; j++ {
					d, err := s.Add(context.Background(), "o"+strconv.Itoa(i), "m"+strconv.Itoa(j), time.Millisecond)
					if err != nil {
						failed.Store(err)
						return
					}
					out[i]["m"+strconv.Itoa(j)] = d
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("seeding: %v", err)
	}
	m := make(map[string]map[string]time.Time, owners)
	for i, ms := range out {
		m["o"+strconv.Itoa(i)] = ms
	}
	return m
}

// eventKey names an event uniquely: stream IDs are unique within one
// shard's stream only.
func eventKey(e Expiry) string { return strconv.Itoa(e.Shard) + "/" + e.ID }

// streamMs is the millisecond part of a stream entry ID: when Redis wrote it.
func streamMs(t *testing.T, id string) int64 {
	t.Helper()
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		t.Fatalf("stream ID %q: %v", id, err)
	}
	return n
}

// TestKillSweeperMidDrain kills a sweeper process (SIGKILL) while it drains
// a shard of thousands of expired members, one owner per batch, with a
// second sweeper (in this process) running all along. It checks that:
//
//   - the kill landed mid-drain: expired members were left unswept;
//   - nothing was swept in the dead sweeper's shard while its lease lived
//     (the survivor waited for it to lapse);
//   - afterwards no expired member is left, the index is empty, and every
//     member produced exactly one event, with its deadline (no loss, no
//     duplicate);
//   - the survivor swept every member still unswept at the kill, within the
//     deadline of the wait (killWait; how long it took after the lease
//     lapsed is logged, not asserted: a loaded machine delays anything).
func TestKillSweeperMidDrain(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const (
			owners, per = 1500, 2
			total       = owners * per
			leaseTTL    = 1500 * time.Millisecond
			maxIdle     = 200 * time.Millisecond
		)
		ctx := context.Background()
		s := must[*Set](t)(New(b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		seeded := seedExpired(t, s, owners, per)

		h := startHelper(t, "sweeper", append(b.env(s), helperLease+"="+leaseTTL.String())...)
		h.waitLine("a first batch", func(l string) bool { return strings.HasPrefix(l, "swept ") })

		// The survivor runs from now on: it may take a shard the helper has
		// not reached yet, but not one whose lease the helper holds.
		var mu sync.Mutex
		var survivor SweepStats
		var sweepErrs []error
		stop := runSweeper(t, NewSweeper(s, WithLeaseTTL(leaseTTL), WithMaxIdle(maxIdle),
			WithSweepHandler(func(st SweepStats) { mu.Lock(); survivor.add(st); mu.Unlock() }),
			WithErrorHandler(func(err error) { mu.Lock(); sweepErrs = append(sweepErrs, err); mu.Unlock() })))

		last := h.waitLine("a tenth of the members swept", func(l string) bool {
			f := strings.Fields(l)
			n, _ := strconv.Atoi(f[len(f)-1])
			return f[0] == "swept" && n >= total/10
		})
		h.kill()
		killed := time.Now()
		// The line read last names a shard the helper was sweeping; the
		// helper printed more after it, but stayed on the same shard unless
		// it finished it.
		h.mu.Lock()
		lastLine := h.lines[len(h.lines)-1]
		h.mu.Unlock()
		f := strings.Fields(lastLine)
		shard, _ := strconv.Atoi(f[1])
		swept, _ := strconv.Atoi(f[2])
		leaseLeft := b.rdb.PTTL(ctx, s.shards[shard].lease).Val()
		leaseRead := time.Now()

		left := 0
		for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
			left += int(st.MembersDue)
		}
		if left == 0 || swept >= total {
			t.Fatalf("the kill landed after the drain (helper swept %d of %d, %d left): make the drain slower", swept, total, left)
		}
		t.Logf("%s: killed the helper sweeper after it reported %q (last line %q): %d of %d swept, %d members due; its lease on shard %d had %v left",
			b.name, last, lastLine, swept, total, left, shard, leaseLeft)

		waitHealed(t, "every member swept after the kill", killWait, func() error {
			n := int64(0)
			for _, sk := range s.shards {
				n += b.rdb.XLen(ctx, sk.events).Val()
			}
			if n < total {
				return fmt.Errorf("%d events of %d", n, total)
			}
			if idx := indexOf(t, s); len(idx) > 0 {
				return fmt.Errorf("%d owners still indexed", len(idx))
			}
			return nil
		})
		drained := time.Now()
		stop()

		checkSwept(t, s, seeded, time.Now())
		seen := map[string]int{}
		var firstAfter, lastAfter int64 = -1, -1
		killMs := killed.UnixMilli()
		for i, sk := range s.shards {
			for _, m := range b.rdb.XRange(ctx, sk.events, "-", "+").Val() {
				e, err := parseExpiry(i, m, 0)
				if err != nil {
					t.Fatal(err)
				}
				seen[e.Owner+"/"+e.Member]++
				if want := seeded[e.Owner][e.Member]; !e.Deadline.Equal(want) {
					t.Errorf("event %s/%s: deadline %v, want %v", e.Owner, e.Member, e.Deadline, want)
				}
				at := streamMs(t, m.ID)
				if at > killMs {
					if firstAfter < 0 || at < firstAfter {
						firstAfter = at
					}
					lastAfter = max(lastAfter, at)
				}
				// The helper's last script may land a moment after the
				// kill; after that the shard is the lease holder's alone.
				if i == shard && leaseLeft > 0 && at >= leaseRead.UnixMilli()+20 && at < leaseRead.Add(leaseLeft).UnixMilli()-2 {
					t.Errorf("event %s written %dms after the kill, while the dead sweeper's lease on shard %d still lived", m.ID, at-killMs, shard)
				}
			}
		}
		var dup []string
		for k, n := range seen {
			if n != 1 {
				dup = append(dup, fmt.Sprintf("%s x%d", k, n))
			}
		}
		slices.Sort(dup)
		if len(seen) != total || len(dup) > 0 {
			t.Fatalf("%d of %d members have events; duplicated: %v", len(seen), total, dup)
		}
		if lastAfter < 0 {
			t.Fatal("no event was written after the kill: the survivor swept nothing")
		}
		mu.Lock()
		defer mu.Unlock()
		for _, err := range sweepErrs {
			t.Errorf("survivor reported %v", err)
		}
		t.Logf("%s: after the kill: first survivor event +%dms, last +%dms (lease %v + max idle %v), drained in %v; survivor %+v",
			b.name, firstAfter-killMs, lastAfter-killMs, leaseTTL, maxIdle, drained.Sub(killed).Round(time.Millisecond), survivor)
	})
}

// TestKillConsumerBeforeAck kills a consumer process (SIGKILL) whose handler
// has received an event and not returned, so it never acknowledged it (nor
// the rest of the batch it had read). A consumer of the same group in this
// process then handles every event: each one the dead consumer had received
// comes again with Attempt >= 2, not before the visibility timeout counted
// from the dead consumer's start, and all are acknowledged: none is lost
// or dead-lettered, the streams end empty with nothing pending.
func TestKillConsumerBeforeAck(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 30
		const vis = time.Second
		ctx := context.Background()
		s := must[*Set](t)(New(b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		seeded := seedExpired(t, s, n, 1)
		time.Sleep(2 * time.Millisecond)
		if st, err := NewSweeper(s).SweepOnce(ctx); err != nil || st.Expired != n {
			t.Fatalf("sweep: %+v %v, want %d expired", st, err, n)
		}

		h := startHelper(t, "consumer", append(b.env(s), helperVis+"="+vis.String())...)
		startLine := h.waitLine("the start line", func(l string) bool { return strings.HasPrefix(l, "start ") })
		got := h.waitLine("an event", func(l string) bool { return strings.HasPrefix(l, "got ") })
		h.kill()
		startNs, _ := strconv.ParseInt(strings.Fields(startLine)[1], 10, 64)
		started := time.Unix(0, startNs)
		gotID := strings.Fields(got)[1] + "/" + strings.Fields(got)[2]

		// What the dead consumer held: everything its last read delivered.
		doomed := map[string]bool{}
		// Stream IDs are unique within a shard's stream only.
		for i, sk := range s.shards {
			p, err := b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: sk.events, Group: "g", Start: "-", End: "+", Count: 1000, Consumer: "doomed"}).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range p {
				doomed[strconv.Itoa(i)+"/"+e.ID] = true
			}
		}
		if !doomed[gotID] {
			t.Fatalf("the event the handler got (%s) is not pending on the dead consumer: %v", gotID, doomed)
		}

		var rec recorder
		handled := map[string]time.Time{}
		var mu sync.Mutex
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			mu.Lock()
			if id := eventKey(e); handled[id].IsZero() {
				handled[id] = time.Now()
			}
			mu.Unlock()
			rec.add(e)
			return nil
		}, WithVisibilityTimeout(vis), WithPollInterval(10*time.Millisecond))
		waitHealed(t, "every event handled and acknowledged", killWait, func() error {
			for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
				if st.Events != 0 || st.Pending != 0 || st.Dead != 0 {
					return fmt.Errorf("shard %d: %d events, %d pending, %d dead", st.Shard, st.Events, st.Pending, st.Dead)
				}
			}
			return nil
		})
		stop()

		members := map[string]int{}
		var first time.Duration = -1
		for _, e := range rec.events() {
			id := eventKey(e)
			members[e.Owner+"/"+e.Member]++
			if !e.Deadline.Equal(seeded[e.Owner][e.Member]) {
				t.Errorf("event %+v: deadline, want %v", e, seeded[e.Owner][e.Member])
			}
			switch {
			case doomed[id] && e.Attempt < 2:
				t.Errorf("event %s was delivered to the dead consumer, redelivered with attempt %d", id, e.Attempt)
			case !doomed[id] && e.Attempt != 1:
				t.Errorf("event %s never delivered before, attempt %d", id, e.Attempt)
			}
			if doomed[id] {
				// Delivered to the dead consumer after it started, so not
				// claimable before start + visibility (Redis counts idle
				// time in whole ms: 2ms of tolerance).
				wait := handled[id].Sub(started)
				if wait < vis-2*time.Millisecond {
					t.Errorf("event %s redelivered %v after the dead consumer started, before the %v visibility timeout", id, wait, vis)
				}
				if first < 0 || wait < first {
					first = wait
				}
			}
		}
		if len(members) != n {
			t.Fatalf("%d of %d members' events handled", len(members), n)
		}
		if d := must[[]DeadLetter](t)(s.DeadLetters(ctx, AllShards, 0)); len(d) != 0 {
			t.Fatalf("dead letters: %+v", d)
		}
		t.Logf("%s: the dead consumer held %d of %d events; the heir handled %d deliveries, the first redelivery %v after the dead consumer started (visibility %v)",
			b.name, len(doomed), n, rec.len(), first.Round(time.Millisecond), vis)
	})
}
