package expset

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// System tests of AcquireWait: waiters in other processes (this test binary
// run again, as the kill tests do), SIGKILL, and a thousand idle waiters
// counted with INFO commandstats. Real Redis only, like the kill tests.

// waiterHelper is the helper role "waiter": for each line "wait <member>"
// read from stdin it calls AcquireWait for owner "tenant" with the limit in
// EXPSET_HELPER_LIMIT, prints "admitted <member>", holds the slot for
// EXPSET_HELPER_HOLD, releases it and prints "released <member>" (or
// "error <member> <error>").
func waiterHelper(ctx context.Context, s *Set, say func(string, ...any)) error {
	limit, err := strconv.Atoi(os.Getenv(helperLimit))
	if err != nil {
		return err
	}
	hold, err := time.ParseDuration(os.Getenv(helperHold))
	if err != nil {
		return err
	}
	q, err := NewQuota(s, limit)
	if err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		m, ok := strings.CutPrefix(in.Text(), "wait ")
		if !ok {
			return fmt.Errorf("unknown command %q", in.Text())
		}
		go func() {
			d, err := q.AcquireWait(ctx, "tenant", m, time.Minute)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("not allowed: %+v", d)
			}
			if err != nil {
				say("error %s %v", m, err)
				return
			}
			say("admitted %s", m)
			time.Sleep(hold)
			if _, err := q.Release(ctx, "tenant", m); err != nil {
				say("error %s %v", m, err)
				return
			}
			say("released %s", m)
		}()
	}
	select {} // killed by the test
}

// monitor records what the node holding key runs (MONITOR on a connection
// of its own), scripts' commands included, until stop.
func monitor(t *testing.T, rdb redis.UniversalClient, key string) (stop func() []string) {
	t.Helper()
	ctx := context.Background()
	c, ok := rdb.(*redis.Client)
	if cc, isCluster := rdb.(*redis.ClusterClient); isCluster {
		var err error
		if c, err = cc.MasterForKey(ctx, key); err != nil {
			t.Fatal(err)
		}
		ok = true
	}
	if !ok {
		t.Fatalf("monitor: %T", rdb)
	}
	conn, err := net.Dial("tcp", c.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		rd := bufio.NewReader(conn)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			mu.Lock()
			lines = append(lines, strings.TrimRight(l, "\r\n"))
			mu.Unlock()
		}
	}()
	// MONITOR is in place once it reports a command of ours.
	probe := key + "monitor-probe"
	end := time.Now().Add(killWait)
	for seen := false; !seen; {
		c.Exists(ctx, probe)
		mu.Lock()
		for _, l := range lines {
			seen = seen || strings.Contains(l, probe)
		}
		mu.Unlock()
		if time.Now().After(end) {
			_ = conn.Close()
			t.Fatal("MONITOR reports nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() []string {
		_ = conn.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return lines
	}
}

var quotedArg = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// slotChanges reads the ZADDs and ZREMs of key out of MONITOR lines: the
// members added (in order), and the most members held at once, counting
// initially held at the start.
func slotChanges(lines []string, key string, initially int) (added []string, most int) {
	held := initially
	most = held
	for _, l := range lines {
		args := quotedArg.FindAllStringSubmatch(l, -1)
		if len(args) < 3 || args[1][1] != key {
			continue
		}
		switch strings.ToUpper(args[0][1]) {
		case "ZADD":
			added = append(added, args[len(args)-1][1])
			held++
		case "ZREM":
			held -= len(args) - 2
		}
		most = max(most, held)
	}
	return added, most
}

// TestWaitProcesses: limit 2, 20 waiters in 3 processes joining one by one
// for one owner, each holding its slot 20ms. Read from MONITOR on the
// owner's node: never more than 2 members held at once, admission order
// equals arrival order, every waiter admitted; and nothing of the line is
// left.
func TestWaitProcesses(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n, limit = 20, 2
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		q := must[*Quota](t)(NewQuota(s, limit))
		for i := 0; i < limit; i++ {
			must[Decision](t)(q.Acquire(ctx, "tenant", "hold"+strconv.Itoa(i), time.Minute))
		}
		env := append(b.env(s), helperLimit+"="+strconv.Itoa(limit), helperHold+"=20ms")
		var hs []*helper
		for p := 0; p < 3; p++ {
			hs = append(hs, startHelper(t, "waiter", env...))
		}
		key := s.OwnerKey("tenant")
		stop := monitor(t, b.rdb, key)
		var want []string
		for i := 0; i < n; i++ {
			m := "m" + strconv.Itoa(i)
			want = append(want, m)
			if _, err := fmt.Fprintf(hs[i%3].stdin, "wait %s\n", m); err != nil {
				t.Fatal(err)
			}
			waitQueued(t, b.rdb, s, "tenant", int64(i+1))
		}
		started := time.Now()
		for i := 0; i < limit; i++ {
			must[bool](t)(q.Release(ctx, "tenant", "hold"+strconv.Itoa(i)))
		}
		for i, m := range want {
			hs[i%3].waitLine("released "+m, func(l string) bool {
				if strings.HasPrefix(l, "error ") {
					t.Fatalf("helper: %s", l)
				}
				return l == "released "+m
			})
		}
		elapsed := time.Since(started)
		added, most := slotChanges(stop(), key, limit)
		if !slices.Equal(added, want) {
			t.Errorf("admitted in order %v, want %v", added, want)
		}
		if most > limit {
			t.Errorf("%d members held at once, limit %d", most, limit)
		}
		checkNoTrace(t, backend{rdb: b.rdb}, s, "tenant")
		t.Logf("%s: %d waiters in 3 processes admitted in arrival order, at most %d held, in %v", b.name, n, most, elapsed.Round(time.Millisecond))
	})
}

// TestWaitKilledWaiter: a waiter at the head of the line is killed
// (SIGKILL) and a slot frees at once; the waiter behind it, in this
// process, is admitted once the dead ticket's lease lapses. How long after
// the kill is logged beside the promise (waitLease + waitRenew), not
// asserted: the test waits for the admission up to killWait.
func TestWaitKilledWaiter(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(2), WithExpiryEvents()))
		q := must[*Quota](t)(NewQuota(s, 1))
		must[Decision](t)(q.Acquire(ctx, "tenant", "hold", time.Minute))
		h := startHelper(t, "waiter", append(b.env(s), helperLimit+"=1", helperHold+"=1h")...)
		if _, err := fmt.Fprintln(h.stdin, "wait doomed"); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, b.rdb, s, "tenant", 1)
		admitted := make(chan time.Time, 1)
		go func() {
			d, err := q.AcquireWait(ctx, "tenant", "heir", time.Minute)
			if err != nil || !d.Allowed {
				t.Errorf("heir: %+v %v", d, err)
			}
			admitted <- time.Now()
		}()
		waitQueued(t, b.rdb, s, "tenant", 2)
		h.kill()
		killed := time.Now()
		must[bool](t)(q.Release(ctx, "tenant", "hold"))
		var at time.Time
		select {
		case at = <-admitted:
		case <-time.After(killWait):
			t.Fatalf("the heir was not admitted %v after the kill", killWait)
		}
		took := at.Sub(killed)
		if ok := must[bool](t)(s.Contains(ctx, "tenant", "doomed")); ok {
			t.Fatal("the killed waiter holds a slot")
		}
		t.Logf("%s: the waiter behind a killed head was admitted %v after the kill (bound: lease %v + renewal %v)", b.name, took.Round(time.Millisecond), waitLease, waitRenew)
		must[bool](t)(q.Release(ctx, "tenant", "heir"))
		checkNoTrace(t, backend{rdb: b.rdb}, s, "tenant")
	})
}

// commandCalls sums INFO commandstats over the server (every master of a
// cluster): calls per command, leaving out INFO itself.
func commandCalls(t *testing.T, rdb redis.UniversalClient) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]int64{}
	var mu sync.Mutex
	add := func(ctx context.Context, c redis.UniversalClient) error {
		info, err := redistest.Info(ctx, c, "commandstats")
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for k, v := range info {
			cmd, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok || cmd == "info" {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %q", k, v)
			}
			out[cmd] += n
		}
		return nil
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return add(ctx, c) })
	} else {
		err = add(ctx, rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWaitIdleCommands: 1,000 waiters in this process wait for one owner
// whose slot is held for a minute. While they wait, Redis runs no more than
// the keep-alive: one script call per waitRenew for the owner (whatever the
// number of waiters) and one PING per 3*waitRenew on the shard's wake-up
// subscription, counted with INFO commandstats over 5 seconds. Then they
// all give up, leaving nothing.
func TestWaitIdleCommands(t *testing.T) {
	redistest.SystemTest(t)
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		const n = 1000
		const span = 5 * time.Second
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb)))
		q := must[*Quota](t)(NewQuota(s, 1))
		must[Decision](t)(q.Acquire(ctx, "tenant", "hold", time.Minute))
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = q.AcquireWait(ctx, "tenant", "m"+strconv.Itoa(i), time.Minute)
			}()
		}
		waitQueued(t, b.rdb, s, "tenant", n)
		time.Sleep(200 * time.Millisecond) // the last joins' replies
		before := commandCalls(t, b.rdb)
		time.Sleep(span)
		after := commandCalls(t, b.rdb)
		total := int64(0)
		var parts []string
		for cmd, c := range after {
			if d := c - before[cmd]; d > 0 {
				total += d
				parts = append(parts, fmt.Sprintf("%s %d", cmd, d))
			}
		}
		slices.Sort(parts)
		// INFO commandstats counts the commands scripts run, too: those of
		// the renewal script run at most twice per call.
		renewals := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
		pings := after["ping"] - before["ping"]
		maxRenewals, maxPings := int64(span/waitRenew)+1, int64(span/(3*waitRenew))+1
		t.Logf("%s: %d idle waiters, %v: %d renewal scripts (at most %d), %d pings (at most %d); all commands, scripts' own included: %s",
			b.name, n, span, renewals, maxRenewals, pings, maxPings, strings.Join(parts, ", "))
		if renewals > maxRenewals || pings > maxPings {
			t.Fatalf("more than the keep-alive: %s", strings.Join(parts, ", "))
		}
		for cmd, c := range after {
			d := c - before[cmd]
			if cmd != "evalsha" && cmd != "eval" && cmd != "ping" && !strings.HasPrefix(cmd, "cluster") && d > 2*renewals {
				t.Fatalf("%s ran %d times, more than the %d renewal scripts run it: %s", cmd, d, renewals, strings.Join(parts, ", "))
			}
		}
		cancel()
		wg.Wait()
		checkNoTrace(t, backend{rdb: b.rdb}, s, "tenant")
	})
}

// TestWaitResubscribes: the server drops the waiters' pub/sub connections
// (CLIENT KILL TYPE pubsub) and at once a slot frees, so its wake-up may be
// published while nobody listens. go-redis reconnects and re-subscribes; the
// re-subscription wakes the head, which is admitted (time logged).
func TestWaitResubscribes(t *testing.T) {
	noLeaks(t)
	eachRealBackend(t, func(t *testing.T, b killBackend) {
		ctx := context.Background()
		var mu sync.Mutex
		var subErrs []error
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithHooks(Hooks{OnError: func(_ context.Context, ci CallInfo, retry time.Duration) {
			ei := errorReport{ci, retry}
			mu.Lock()
			subErrs = append(subErrs, fmt.Errorf("%s: %w", ei.Op, ei.Err))
			mu.Unlock()
		}})))
		q := must[*Quota](t)(NewQuota(s, 1))
		// Held for longer than the test waits: only a wake-up admits the
		// next waiter in time, not the holder's expiry.
		must[Decision](t)(q.Acquire(ctx, "tenant", "hold", 10*killWait))
		done := waitAsync(ctx, q, "next")
		waitQueued(t, b.rdb, s, "tenant", 1)
		kill := func(ctx context.Context, c redis.UniversalClient) error {
			return c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
		}
		if cc, ok := b.rdb.(*redis.ClusterClient); ok {
			must[struct{}](t)(struct{}{}, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return kill(ctx, c) }))
		} else {
			must[struct{}](t)(struct{}{}, kill(ctx, b.rdb))
		}
		released := time.Now()
		must[bool](t)(q.Release(ctx, "tenant", "hold"))
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(killWait):
			t.Fatalf("not admitted %v after the release", killWait)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%s: admitted %v after the release that followed the kill; the subscription reported %d errors (%v)",
			b.name, time.Since(released).Round(time.Microsecond), len(subErrs), subErrs)
		checkNoTrace(t, backend{rdb: b.rdb}, s, "tenant")
	})
}
