package expset

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
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
// TestHelperProcess selected and the role it plays in the environment. This
// file holds that helper process and what the kill tests share; the tests
// are in sweeper_kill_test.go, consume_kill_test.go and the other
// *_kill_test.go files.

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
//   - ticker: see helperTicker.
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
	case "ticker":
		return helperTicker(s, say)
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
	stderr lockedBuffer
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

// lockedBuffer is a bytes.Buffer safe to read while exec copies a
// process's output into it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
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
