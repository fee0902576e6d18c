package expset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
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
	helperVis    = "EXPSET_HELPER_VIS"    // consumer: WithLeaseTTL
	helperLimit  = "EXPSET_HELPER_LIMIT"  // waiter: the quota's limit
	helperHold   = "EXPSET_HELPER_HOLD"   // waiter: how long each admitted member is held
	helperGroup  = "EXPSET_HELPER_GROUP"  // worker: its consumer group
	helperName   = "EXPSET_HELPER_NAME"   // worker: its consumer name
	helperHangAt = "EXPSET_HELPER_HANG"   // worker: its handler never returns from this call on (0: never)
	helperFail   = "EXPSET_HELPER_FAIL"   // worker: its handler fails every event of this owner
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
//   - waiter: see waiterHelper.
//   - acker: see helperAcker.
//   - failer: see helperFailer.
//   - pool: see helperPool.
//   - reserver: see helperReserver.
//   - worker: Consume as consumer EXPSET_HELPER_NAME of group
//     EXPSET_HELPER_GROUP (WithMaxAttempts(2)) until SIGTERM, which shuts it
//     down gracefully; its handler takes 5ms and prints "call <shard> <ID>
//     <attempt>" when it starts and "ok ..." or "fail ..." (the owner named
//     EXPSET_HELPER_FAIL) as it returns, except from call EXPSET_HELPER_HANG
//     on, which never returns (the process is SIGKILLed in it).
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
	name := helperClientName(os.Getpid())
	if len(addrs) == 1 {
		rdb = redis.NewClient(&redis.Options{Addr: addrs[0], ClientName: name})
	} else {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DisableIdentity: true, ClientName: name})
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
	hooks := Hooks{OnSweep: func(_ context.Context, ci CallInfo, si SweepStats) {
		say("swept %d %d", ci.Shard, swept.Add(int64(si.Expired)))
		time.Sleep(2 * time.Millisecond)
	}}
	ctx := context.Background()
	s, err := Open(ctx, rdb, os.Getenv(helperSet), WithShards(shards), WithExpiryEvents(), WithHooks(hooks))
	if err != nil {
		return err
	}
	switch role {
	case "waiter":
		return waiterHelper(ctx, s, say)
	case "sweeper":
		lease, err := time.ParseDuration(os.Getenv(helperLease))
		if err != nil {
			return err
		}
		w, err := NewSweeper(s, WithLeaseTTL(lease), WithPollInterval(100*time.Millisecond),
			WithOwnersPerBatch(1), WithMembersPerBatch(2))
		if err != nil {
			return err
		}
		return w.Run(ctx)
	case "worker":
		return helperWorker(s)
	case "acker":
		return helperAcker(s, say)
	case "failer":
		return helperFailer(s, say)
	case "pool":
		return helperPool(s, say)
	case "reserver":
		return helperReserver(s, say)
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
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond))
	}
	return fmt.Errorf("unknown role %q", role)
}

// helper is a running helper process and what it printed.
type helper struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
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
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatalf("start helper %s: %v", role, err)
	}
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

// helperClientName names the connections of the helper process pid.
func helperClientName(pid int) string { return "expset-kill-helper-" + strconv.Itoa(pid) }

// waitGone waits until no server of b has a connection of the killed
// helper h left. A server runs what it had read from a connection before it
// closes it, so after this every command the helper sent has run (or never
// will): what Redis counted can be read without a race against the dead
// process's last pipeline, which a server may read after a newer command
// of another connection.
func (b killBackend) waitGone(t *testing.T, h *helper) {
	t.Helper()
	name := helperClientName(h.cmd.Process.Pid)
	ctx := context.Background()
	connected := func(c *redis.Client) error {
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name="+name+" ") {
				return fmt.Errorf("still connected: %s", line)
			}
		}
		return nil
	}
	end := time.Now().Add(killWait)
	for {
		var err error
		switch c := b.rdb.(type) {
		case *redis.ClusterClient:
			err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return connected(n) })
		case *redis.Client:
			err = connected(c)
		}
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("the killed helper's connections: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// expiredSet opens a set of the given shards with expiry events on b and
// gives it n events, one for each of owners o0..o(n-1), swept.
func expiredSet(t *testing.T, b killBackend, shards, n int) *Set {
	t.Helper()
	ctx := context.Background()
	s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(shards), WithExpiryEvents()))
	seedExpired(t, s, n, 1)
	time.Sleep(2 * time.Millisecond)
	if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n {
		t.Fatalf("sweep: %+v %v, want %d expired", st, err, n)
	}
	return s
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
//   - nothing was swept in the shards the dead sweeper's lease held while
//     it lived (the survivor waited for it to lapse);
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
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		seeded := seedExpired(t, s, owners, per)

		h := startHelper(t, "sweeper", append(b.env(s), helperLease+"="+leaseTTL.String())...)
		h.waitLine("a first batch", func(l string) bool { return strings.HasPrefix(l, "swept ") })
		helper := sweeperTokens(t, s)
		if len(helper) != 1 {
			t.Fatalf("leases %q, want the helper's alone", helper)
		}

		// The survivor runs from now on: it may take a shard the helper has
		// not reached yet, but not one whose lease the helper holds.
		var mu sync.Mutex
		var survivor SweepStats
		var sweepErrs []error
		s.hooks.OnSweep = func(_ context.Context, ci CallInfo, si SweepStats) { mu.Lock(); survivor.add(si); mu.Unlock() }
		s.hooks.OnError = func(_ context.Context, ci CallInfo, retry time.Duration) {
			ei := errorReport{ci, retry}
			mu.Lock()
			sweepErrs = append(sweepErrs, ei.Err)
			mu.Unlock()
		}
		stop := runSweeper(t, newSweeper(t, s, WithLeaseTTL(leaseTTL), WithPollInterval(maxIdle)))

		last := h.waitLine("a tenth of the members swept", func(l string) bool {
			f := strings.Fields(l)
			n, _ := strconv.Atoi(f[len(f)-1])
			return f[0] == "swept" && n >= total/10
		})
		h.kill()
		killed := time.Now()
		h.mu.Lock()
		lastLine := h.lines[len(h.lines)-1]
		h.mu.Unlock()
		swept, _ := strconv.Atoi(strings.Fields(lastLine)[2])
		// The shards the helper's lease holds, and how long it has left.
		reg := must[registry](t)(s.sweepers(ctx, "", -1))
		end := b.rdb.ZScore(ctx, sweepersKey(s.name), helper[0]).Val()
		leaseLeft := time.Duration(int64(end)-reg.now) * time.Millisecond
		leaseRead := time.Now()
		var held []int
		for i := range s.shards {
			if holder(reg.tokens, i) == helper[0] {
				held = append(held, i)
			}
		}

		left := 0
		for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
			left += int(st.MembersDue)
		}
		if left == 0 || swept >= total {
			t.Fatalf("the kill landed after the drain (helper swept %d of %d, %d left): make the drain slower", swept, total, left)
		}
		t.Logf("%s: killed the helper sweeper after it reported %q (last line %q): %d of %d swept, %d members due; its lease, on shards %v, had %v left",
			b.name, last, lastLine, swept, total, left, held, leaseLeft)

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
				// kill; after that its shards are its lease's alone.
				if slices.Contains(held, i) && leaseLeft > 0 && at >= leaseRead.UnixMilli()+20 && at < int64(end)-2 {
					t.Errorf("event %s written %dms after the kill, while the dead sweeper's lease on shard %d still lived", m.ID, at-killMs, i)
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
// process then handles every event: the one in the dead consumer's handler
// comes again with Attempt 2, the rest of what it had read with Attempt 1
// (no handler call had used an attempt on them), none before the
// lease TTL counted from the dead consumer's start, and all are
// acknowledged: none is lost or dead-lettered, the streams end empty with
// nothing pending.
func TestKillConsumerBeforeAck(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 30
		const vis = time.Second
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		seeded := seedExpired(t, s, n, 1)
		time.Sleep(2 * time.Millisecond)
		if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n {
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
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond))
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
			// Only the event whose handler call the kill cut short used an
			// attempt; the rest of the batch the dead consumer had read
			// was never handed to its handler.
			switch {
			case id == gotID && e.Attempt != 2:
				t.Errorf("event %s was in the dead consumer's handler, redelivered with attempt %d, want 2", id, e.Attempt)
			case id != gotID && e.Attempt != 1:
				t.Errorf("event %s never reached a handler before, attempt %d, want 1", id, e.Attempt)
			}
			if doomed[id] {
				// Delivered to the dead consumer after it started, so not
				// claimable before start + lease TTL (Redis counts idle
				// time in whole ms: 2ms of tolerance).
				wait := handled[id].Sub(started)
				if wait < vis-2*time.Millisecond {
					t.Errorf("event %s redelivered %v after the dead consumer started, before the %v lease TTL", id, wait, vis)
				}
				if first < 0 || wait < first {
					first = wait
				}
			}
		}
		if len(members) != n {
			t.Fatalf("%d of %d members' events handled", len(members), n)
		}
		if d := must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0)); len(d) != 0 {
			t.Fatalf("dead letters: %+v", d)
		}
		t.Logf("%s: the dead consumer held %d of %d events; the heir handled %d deliveries, the first redelivery %v after the dead consumer started (lease TTL %v)",
			b.name, len(doomed), n, rec.len(), first.Round(time.Millisecond), vis)
	})
}

// helperWorker is the worker role of TestHelperProcess.
func helperWorker(s *Set) error {
	vis, err := time.ParseDuration(os.Getenv(helperVis))
	if err != nil {
		return err
	}
	hangAt, _ := strconv.Atoi(os.Getenv(helperHangAt))
	group, fail := os.Getenv(helperGroup), os.Getenv(helperFail)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	calls := 0
	fmt.Println("start")
	return s.Consume(ctx, group, os.Getenv(helperName), func(_ context.Context, e Expiry) error {
		calls++
		fmt.Printf("call %d %s %d\n", e.Shard, e.ID, e.Attempt)
		if hangAt > 0 && calls >= hangAt {
			time.Sleep(time.Hour) // SIGKILLed in here
		}
		time.Sleep(5 * time.Millisecond)
		if e.Owner == fail {
			fmt.Printf("fail %d %s %d\n", e.Shard, e.ID, e.Attempt)
			return errors.New("always fails")
		}
		fmt.Printf("ok %d %s %d\n", e.Shard, e.ID, e.Attempt)
		return nil
	}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithMaxAttempts(2), WithReadBatch(10))
}

// term sends SIGTERM and waits until the process has exited.
func (h *helper) term() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	<-h.exited
}

// calls returns the lines of the helper that start with one of prefixes.
func (h *helper) calls(prefixes ...string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.lines {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p+" ") {
				out = append(out, l)
			}
		}
	}
	return out
}

// TestKillConsumersTwoGroups: two consumer groups on one set, "billing" and
// "email" (declared), each with a worker process SIGKILLed in a handler call
// and another shut down gracefully (SIGTERM) in the middle of a batch; every
// email handler call of one owner's event fails. Consumers of both groups in
// this process then finish. Each group handled every event (email all but
// the failing one), that one is the only dead letter, after its 2 failing
// calls; no event is dead-lettered without a failing handler call, none is
// both handled and dead-lettered, and the events whose handler calls the
// kills cut short were handled afterwards at attempt 2, every other event
// (also those the graceful shutdown released) at attempt 1.
func TestKillConsumersTwoGroups(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 60
		const vis = 500 * time.Millisecond
		const failing = "o7"
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents(), WithConsumerGroups("billing", "email")))
		seedExpired(t, s, n, 1)
		time.Sleep(2 * time.Millisecond)
		if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n {
			t.Fatalf("sweep: %+v %v, want %d expired", st, err, n)
		}

		var mu sync.Mutex
		calls := map[string][]string{} // group/shard/ID -> "ok@attempt", "fail@attempt", "cut@attempt" per call
		record := func(group string, lines []string) {
			mu.Lock()
			defer mu.Unlock()
			started := map[string]string{}
			for _, l := range lines {
				f := strings.Fields(l) // kind shard ID attempt
				k := group + "/" + f[1] + "/" + f[2]
				switch f[0] {
				case "call":
					started[k] = f[3]
				default:
					calls[k] = append(calls[k], f[0]+"@"+f[3])
					delete(started, k)
				}
			}
			for k, a := range started {
				calls[k] = append(calls[k], "cut@"+a)
			}
		}
		for _, group := range []string{"billing", "email"} {
			env := append(b.env(s), helperVis+"="+vis.String(), helperGroup+"="+group, helperFail+"="+failing)
			killed := startHelper(t, "worker", append(env, helperName+"=killed", helperHangAt+"=4")...)
			killed.waitLine("a hung call", func(l string) bool { return len(killed.calls("call")) >= 4 })
			killed.kill()
			record(group, killed.calls("call", "ok", "fail"))

			graceful := startHelper(t, "worker", append(env, helperName+"=graceful")...)
			graceful.waitLine("five calls", func(string) bool { return len(graceful.calls("ok", "fail")) >= 5 })
			graceful.term()
			if !graceful.cmd.ProcessState.Success() {
				t.Fatalf("%s: the gracefully stopped worker exited with %v; stderr:\n%s", group, graceful.cmd.ProcessState, graceful.stderr.String())
			}
			record(group, graceful.calls("call", "ok", "fail"))
		}

		// Consumers of both groups finish the work.
		var stops []func()
		for _, group := range []string{"billing", "email"} {
			stops = append(stops, consumeInBackground(t, s, group, "heir", func(_ context.Context, e Expiry) error {
				kind, err := "ok", error(nil)
				if e.Owner == failing && group == "email" {
					kind, err = "fail", errors.New("always fails")
				}
				record(group, []string{fmt.Sprintf("%s %d %s %d", kind, e.Shard, e.ID, e.Attempt)})
				return err
			}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithMaxAttempts(2)))
		}
		waitHealed(t, "every event handled or buried by both groups", killWait, func() error {
			for _, st := range must[[]ShardStats](t)(s.Stats(ctx)) {
				if st.Events != 0 || st.Pending != 0 {
					return fmt.Errorf("shard %d: %d events, %d pending", st.Shard, st.Events, st.Pending)
				}
			}
			return nil
		})
		for _, stop := range stops {
			stop()
		}

		dead := map[string]bool{}
		for _, d := range must[[]DeadLetter](t)(s.DeadLetters(ctx, allShards, 0)) {
			dead[d.Group+"/"+eventKey(d.Event)] = true
			if d.Group != "email" || d.Event.Owner != failing || d.Event.Attempt != 2 || d.Error != "always fails" {
				t.Errorf("dead letter %+v", d)
			}
		}
		if len(dead) != 1 {
			t.Errorf("%d dead letters, want 1", len(dead))
		}
		mu.Lock()
		defer mu.Unlock()
		cut := 0
		handled := map[string]int{}
		for k, cs := range calls {
			group := strings.SplitN(k, "/", 2)[0]
			oks, fails := 0, 0
			for _, c := range cs {
				switch {
				case strings.HasPrefix(c, "ok@"):
					oks++
				case strings.HasPrefix(c, "fail@"):
					fails++
				case strings.HasPrefix(c, "cut@"):
					cut++
					if !slices.Contains(cs, "ok@2") {
						t.Errorf("%s: a kill cut its call short, then %v; want ok at attempt 2", k, cs)
					}
				}
			}
			if oks > 0 {
				handled[group]++
			}
			if fails == 0 && !slices.ContainsFunc(cs, func(c string) bool { return strings.HasPrefix(c, "cut@") }) && !slices.Contains(cs, "ok@1") {
				t.Errorf("%s: calls %v; want ok at attempt 1 (the graceful shutdown charged nothing)", k, cs)
			}
			if dead[k] && (oks > 0 || fails != 2) {
				t.Errorf("%s dead-lettered after calls %v", k, cs)
			}
			if !dead[k] && oks == 0 {
				t.Errorf("%s: never handled, not dead-lettered: %v", k, cs)
			}
		}
		if handled["billing"] != n || handled["email"] != n-1 {
			t.Errorf("handled %v, want billing %d and email %d", handled, n, n-1)
		}
		if cut != 2 {
			t.Errorf("%d calls cut short by a kill, want 2", cut)
		}
		t.Logf("%s: %d events handled by billing, %d by email, 1 dead letter; calls %d", b.name, handled["billing"], handled["email"], len(calls))
	})
}

// helperAcker is the acker role of TestHelperProcess: Consume as consumer
// "dying" of group "g" with WithMaxAttempts(1), a handler that takes 5ms and
// prints "ok <shard> <ID>" as it returns nil; 15ms after the third such
// return the process SIGKILLs itself, inside the acknowledgement-batching
// window (100ms, or the read's events all handled).
func helperAcker(s *Set, say func(string, ...any)) error {
	vis, err := time.ParseDuration(os.Getenv(helperVis))
	if err != nil {
		return err
	}
	calls := 0
	return s.Consume(context.Background(), "g", "dying", func(_ context.Context, e Expiry) error {
		time.Sleep(5 * time.Millisecond)
		say("ok %d %s", e.Shard, e.ID)
		if calls++; calls == 3 {
			time.AfterFunc(15*time.Millisecond, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
		}
		return nil
	}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithMaxAttempts(1), WithReadBatch(10))
}

// TestKillAfterHandledNotDeadLettered: a consumer process with
// WithMaxAttempts(1) is SIGKILLed 15ms after its handler returned nil, with
// acknowledgements of a batch still waiting in it. A consumer of the group
// in this process then finishes: no event whose handler returned nil is
// dead-lettered (only one whose call the kill cut short may be), and every
// event is handled or dead-lettered.
func TestKillAfterHandledNotDeadLettered(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 50
		const vis = 500 * time.Millisecond
		ctx := context.Background()
		s := must[*Set](t)(Open(ctx, b.rdb, uniqueName(t, b.rdb), WithShards(1), WithExpiryEvents()))
		seedExpired(t, s, n, 1)
		time.Sleep(2 * time.Millisecond)
		if st, err := newSweeper(t, s).SweepOnce(ctx); err != nil || st.Expired != n {
			t.Fatalf("sweep: %+v %v, want %d expired", st, err, n)
		}
		h := startHelper(t, "acker", append(b.env(s), helperVis+"="+vis.String())...)
		<-h.exited
		handled := map[string]bool{}
		for _, l := range h.calls("ok") {
			f := strings.Fields(l)
			handled[f[1]+"/"+f[2]] = true
		}
		if len(handled) < 3 {
			t.Fatalf("the helper handled %d events before it died, want 3 or more; stderr:\n%s", len(handled), h.stderr.String())
		}
		heir := newHandledBy()
		stop := consumeInBackground(t, s, "g", "heir", func(_ context.Context, e Expiry) error {
			return heir.call("heir", e, nil)
		}, WithLeaseTTL(vis), WithPollInterval(10*time.Millisecond), WithMaxAttempts(1))
		waitFor(t, "every event handled or dead-lettered", func() bool { return drained(s) })
		stop()
		dead := deadKeys(t, s)
		for k := range dead {
			if handled[k] {
				t.Errorf("%s: its handler returned nil, yet it was dead-lettered", k)
			}
		}
		all := map[string]bool{}
		for k := range handled {
			all[k] = true
		}
		for _, e := range heir.events() {
			all[eventKey(e)] = true
		}
		for k := range dead {
			all[k] = true
		}
		if len(all) != n {
			t.Errorf("%d of %d events handled or dead-lettered", len(all), n)
		}
		t.Logf("%s: the killed consumer handled %d, the heir %d, %d dead letters (calls the kill cut short)", b.name, len(handled), len(heir.events()), len(dead))
	})
}
