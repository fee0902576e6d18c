package expset

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// Fault tests: what the library promises when Redis misbehaves, checked by
// making it misbehave. The helpers at the top are meant for any fault test
// (the sweeper's and the expiry events' too): flushing the script cache
// everywhere, waiting with a bound and a clear message, recognising a
// timeout, waiting until a paused server has run what it was sent, and
// making sure a write reached a replica.

// faultWait bounds every wait of the fault tests. The waits take
// milliseconds to seconds; the bound only turns a hang into a clear failure.
const faultWait = 30 * time.Second

// flushScripts empties the script cache of rdb: SCRIPT FLUSH on a single
// server, on every master of a cluster. It checks that the library's
// scripts are gone afterwards.
func flushScripts(t testing.TB, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.ScriptFlush(ctx).Err()
		})
	} else {
		err = rdb.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	// ScriptExists on a ClusterClient asks every master and reports true only
	// when all have the script.
	ex, err := rdb.ScriptExists(ctx, store.Named("acquire.lua").Hash(), store.Named("add.lua").Hash()).Result()
	if err != nil {
		t.Fatalf("SCRIPT EXISTS: %v", err)
	}
	if ex[0] || ex[1] {
		t.Fatalf("scripts still cached after SCRIPT FLUSH: %v", ex)
	}
}

// waitHealed calls check until it returns nil, failing t with what and the
// last error when limit passes first. Use it for things that become true
// after a fault heals; it asserts nothing about how long they take.
func waitHealed(t testing.TB, what string, limit time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %v; last check: %v", what, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isTimeout reports whether err is a network timeout or a context deadline,
// the two ways a call to a stalled server ends.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// checkTimeoutErr fails t unless err is a timeout (see isTimeout) that the
// library wrapped with the key it was working on.
func checkTimeoutErr(t testing.TB, op string, err error, key string) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s on a stalled server succeeded", op)
	case !isTimeout(err):
		t.Fatalf("%s on a stalled server: %v, want a net timeout or context.DeadlineExceeded", op, err)
	case !strings.HasPrefix(err.Error(), "expset: ") || !strings.Contains(err.Error(), key):
		t.Fatalf("%s on a stalled server: %q does not name the key %q", op, err, key)
	}
}

// waitDrained waits until srv serves no connection but the one of probe (a
// client with PoolSize 1 that nothing else uses), after every other client of
// srv was closed. Redis runs what a connection sent before it frees it, so
// afterwards every command sent to a paused server has run (or never will):
// the state can be checked without racing with it.
func waitDrained(t testing.TB, probe *redis.Client, name ...string) {
	t.Helper()
	ctx := context.Background()
	if len(name) > 0 {
		// Wait for the named clients only: a server on a loopback port may
		// also be dialled by another test process's loops that once had a
		// server on the same port. A named connection still open counts as
		// drained once the server holds nothing unread from it (qbuf=0) and
		// it has been idle for a second: go-redis v9.22 dials in the
		// background, and a dial that completes after Close puts its
		// connection in a pool nobody closes again, so such a connection
		// (its HELLO run, nothing else) may stay open until the process
		// ends. Those are killed once drained, so the server is left tidy.
		var leaked []string
		waitHealed(t, "the stalled server still runs commands of closed clients", faultWait, func() error {
			list, err := probe.ClientList(ctx).Result()
			if err != nil {
				return err
			}
			leaked = leaked[:0]
			for _, line := range strings.Split(list, "\n") {
				if !slices.Contains(name, clientListField(line, "name")) {
					continue
				}
				idle, _ := strconv.Atoi(clientListField(line, "idle"))
				if clientListField(line, "qbuf") != "0" || idle < 1 {
					return fmt.Errorf("still running: %s", line)
				}
				leaked = append(leaked, clientListField(line, "id"))
			}
			return nil
		})
		for _, id := range leaked {
			_ = probe.Do(ctx, "CLIENT", "KILL", "ID", id).Err()
		}
		return
	}
	waitHealed(t, "the stalled server still serves connections of closed clients", faultWait, func() error {
		info, err := redistest.Info(ctx, probe, "clients")
		if err != nil {
			return err
		}
		if n := info["connected_clients"]; n != "1" {
			return fmt.Errorf("connected_clients:%s, want 1 (the probe)", n)
		}
		return nil
	})
}

// clientListField returns the value of field in one line of CLIENT LIST.
func clientListField(line, field string) string {
	for _, kv := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(kv, field+"="); ok {
			return v
		}
	}
	return ""
}

// waitReplicated makes sure every write the cluster's master of key had
// acknowledged so far has reached at least one replica: it writes a marker
// key in key's slot on one connection to that master, then runs WAIT on the
// same connection. Replication is one ordered stream per master, so once
// the marker is acknowledged, so is everything written before it. It
// deletes the marker afterwards (the DEL may itself not be replicated).
func waitReplicated(t testing.TB, cc *redis.ClusterClient, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatalf("master for %q: %v", key, err)
	}
	conn := master.Conn()
	defer conn.Close()
	marker := "expset-test-wait:{" + hashTag(key) + "}"
	if err := conn.Set(ctx, marker, "1", time.Minute).Err(); err != nil {
		t.Fatalf("SET %s on the master of %s: %v", marker, key, err)
	}
	n, err := conn.Wait(ctx, 1, faultWait).Result()
	if err != nil || n < 1 {
		t.Fatalf("WAIT 1 on the master of %s: %d replicas acknowledged, err %v", key, n, err)
	}
	conn.Del(ctx, marker)
}

// ownerState returns the live members of each owner, earliest first.
func ownerState(t testing.TB, s *Set, owners ...string) map[string][]Member {
	t.Helper()
	out := map[string][]Member{}
	for _, o := range owners {
		ms, err := s.Members(context.Background(), o, 0)
		if err != nil {
			t.Fatalf("members of %q: %v", o, err)
		}
		out[o] = ms
	}
	return out
}

// TestScriptCacheFlushed checks the promise that losing the script cache
// (SCRIPT FLUSH, a restart, a failover to a node that never ran the scripts)
// breaks nothing: every call sends its script again (go-redis's Script.Run
// falls back from EVALSHA to EVAL on NOSCRIPT) and answers as it would have.
// Each call below runs right after the cache was flushed, on every master of
// the cluster.
func TestScriptCacheFlushed(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		flush := func() { t.Helper(); flushScripts(t, b.rdb) }
		clk := newFakeClock()
		t0 := clk.Now()
		flush()
		s, err := Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithClock(clk.Now), WithPayloadStorage())
		if err != nil {
			t.Fatalf("New after SCRIPT FLUSH: %v", err)
		}
		q := must[*Quota](t)(NewQuota(s, 2))

		flush()
		if d, err := s.Add(ctx, "u", "a", time.Minute, WithPayload([]byte("pa"))); err != nil || !d.Equal(t0.Add(time.Minute)) {
			t.Fatalf("Add: %v, %v", d, err)
		}
		flush()
		if d, err := q.Acquire(ctx, "u", "b", 2*time.Minute); err != nil || !d.Allowed || d.Count != 2 {
			t.Fatalf("Acquire: %+v, %v", d, err)
		}
		flush()
		if d, err := q.Acquire(ctx, "u", "c", time.Minute); err != nil || d.Allowed || d.RetryAfter != time.Minute {
			t.Fatalf("Acquire at the limit: %+v, %v", d, err)
		}
		flush()
		if ok, err := s.Contains(ctx, "u", "a"); err != nil || !ok {
			t.Fatalf("Contains: %v, %v", ok, err)
		}
		flush()
		if d, err := s.Deadline(ctx, "u", "b"); err != nil || !d.Equal(t0.Add(2*time.Minute)) {
			t.Fatalf("Deadline: %v, %v", d, err)
		}
		flush()
		if d, err := s.Extend(ctx, "u", "a", 3*time.Minute); err != nil || !d.Equal(t0.Add(3*time.Minute)) {
			t.Fatalf("Extend: %v, %v", d, err)
		}
		flush()
		if n, err := s.Count(ctx, "u"); err != nil || n != 2 {
			t.Fatalf("Count: %v, %v", n, err)
		}
		flush()
		want := []Member{{"b", t0.Add(2 * time.Minute)}, {"a", t0.Add(3 * time.Minute)}}
		if ms, err := s.Members(ctx, "u", 0); err != nil || !equalMembers(ms, want) {
			t.Fatalf("Members: %v, %v; want %v", ms, err, want)
		}
		flush()
		if ms, err := s.Members(ctx, "u", 1); err != nil || !equalMembers(ms, want[:1]) {
			t.Fatalf("Members(n): %v, %v", ms, err)
		}
		flush()
		if p, err := s.Payload(ctx, "u", "a"); err != nil || string(p) != "pa" {
			t.Fatalf("Payload: %q, %v", p, err)
		}
		flush()
		if ok, err := q.Release(ctx, "u", "b"); err != nil || !ok {
			t.Fatalf("Release: %v, %v", ok, err)
		}
		flush()
		if n, err := s.Remove(ctx, "u", "a", "b"); err != nil || n != 1 {
			t.Fatalf("Remove: %v, %v", n, err)
		}
		flush()
		if _, err := Open(ctx, b.rdb, s.Name(), WithPayloadStorage()); err != nil {
			t.Fatalf("Open of the recorded set: %v", err)
		}
	})
}

// TestRestartWithAOFKeepsAcknowledgedWrites checks the promise that the
// library adds no durability gap of its own: on a server with
// `appendonly yes` and `appendfsync always`, every Add and Acquire that
// returned without error survives a crash (SIGKILL, so only the AOF is left)
// with its deadline, and the quota still holds afterwards: a full owner is
// still denied, a retry is still Existing and takes no slot. The set reads
// the server's TIME, as in production. With `appendfsync everysec` (Redis's
// default) a crash can lose the last second of acknowledged writes, and with
// them admissions: the owner could then be admitted again.
func TestRestartWithAOFKeepsAcknowledgedWrites(t *testing.T) {
	redistest.SystemTest(t)
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := srv.Client(t)
	ctx := context.Background()
	s := must[*Set](t)(Open(context.Background(), rdb, uniqueName(t, rdb)))
	q := must[*Quota](t)(NewQuota(s, 3))
	for _, m := range []string{"o1", "o2", "o3"} {
		if d := must[Decision](t)(q.Acquire(ctx, "u", m, time.Hour)); !d.Allowed {
			t.Fatalf("acquire %s before the crash: %+v", m, d)
		}
	}
	must[time.Time](t)(s.Add(ctx, "v", "a", time.Hour))
	must[time.Time](t)(s.Add(ctx, "v", "b", 2*time.Hour))
	before := ownerState(t, s, "u", "v")

	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	waitHealed(t, "the client reconnects after the restart", faultWait, func() error { return rdb.Ping(ctx).Err() })

	if after := ownerState(t, s, "u", "v"); !reflect.DeepEqual(after, before) {
		t.Fatalf("acknowledged writes changed by the crash:\nbefore %v\nafter  %v", before, after)
	}
	if d := must[Decision](t)(q.Acquire(ctx, "u", "o4", time.Hour)); d.Allowed || d.Count != 3 {
		t.Fatalf("after the restart a full owner was admitted: %+v", d)
	}
	d := must[Decision](t)(q.Acquire(ctx, "u", "o2", time.Hour))
	if !d.Allowed || !d.Existing || d.Count != 3 || !d.Deadline.Equal(before["u"][1].Deadline) {
		t.Fatalf("retry after the restart: %+v, want Existing with deadline %v", d, before["u"][1].Deadline)
	}
}

// TestStalledServer checks the promises for a server that stops answering
// (SIGSTOP for longer than the client's ReadTimeout, then SIGCONT):
//
//   - a call fails with a timeout (a net.Error with Timeout(), or
//     context.DeadlineExceeded) wrapped by expset with the key named;
//   - nothing is half-written: each script runs whole or not at all, so the
//     owner's state is either the one before the call or the one after it;
//   - retrying the Acquire of the same member takes no second slot: it is
//     Existing when the first attempt had landed.
//
// A timeout says nothing about whether the script ran: the command usually
// sits in the paused server's socket buffer and runs when it resumes, after
// the client gave up. go-redis by default (MaxRetries 3) also retries a
// timed-out command on a new connection, so one Acquire call may run its
// script several times; Acquire is idempotent, so that still takes one slot.
// Remove and Release are not counted exactly once under such retries: the
// attempt whose reply arrives may report 0 for a member an earlier attempt
// removed.
func TestStalledServer(t *testing.T) {
	redistest.SystemTest(t)
	srv := redistest.Start(t)
	ctx := context.Background()
	clk := newFakeClock()
	// probe is the one client left open after the stall (see waitDrained);
	// it also cleans up the set's keys.
	probe := srv.Client(t, func(o *redis.Options) { o.PoolSize, o.MaxIdleConns = 1, 1 })
	name := uniqueName(t, probe)
	open := func(rdb redis.UniversalClient) *Quota {
		t.Helper()
		return must[*Quota](t)(NewQuota(must[*Set](t)(Open(context.Background(), rdb, name, WithClock(clk.Now))), 3))
	}
	stallOpts := func(retries int) func(*redis.Options) {
		return func(o *redis.Options) {
			o.ReadTimeout, o.WriteTimeout, o.MaxRetries = 250*time.Millisecond, 250*time.Millisecond, retries
			o.ClientName = "stalled-test"
		}
	}
	// once: no retries; retrying: go-redis's default of 3 retries; redial:
	// no retries, and a new connection for every call (its idle connections
	// expire at once), so its call during the stall never gets past the
	// connection set-up and its script never runs.
	once := srv.Client(t, stallOpts(-1))
	retrying := srv.Client(t, stallOpts(3))
	redial := srv.Client(t, stallOpts(-1), func(o *redis.Options) { o.ConnMaxIdleTime = time.Nanosecond })
	qOnce, qRetrying, qRedial := open(once), open(retrying), open(redial)
	owners := []string{"u", "w", "x"}
	for _, o := range owners {
		for _, m := range []string{"m1", "m2"} {
			must[Decision](t)(qOnce.Acquire(ctx, o, m, time.Minute))
		}
	}
	s := qOnce.set
	before := ownerState(t, s, owners...)
	evalsBefore, _, err := redistest.CommandStats(ctx, probe, "evalsha")
	if err != nil {
		t.Fatal(err)
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := srv.Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	var wg sync.WaitGroup
	var errOnce, errRetrying, errRedial, errRead error
	wg.Add(3)
	go func() { defer wg.Done(); _, errOnce = qOnce.Acquire(ctx, "u", "m3", time.Minute) }()
	go func() { defer wg.Done(); _, errRetrying = qRetrying.Acquire(ctx, "w", "m3", time.Minute) }()
	go func() { defer wg.Done(); _, errRedial = qRedial.Acquire(ctx, "x", "m3", time.Minute) }()
	wg.Wait()
	_, errRead = s.Count(ctx, "u")
	resume()
	checkTimeoutErr(t, "Acquire", errOnce, s.OwnerKey("u"))
	checkTimeoutErr(t, "Acquire with go-redis retries", errRetrying, s.OwnerKey("w"))
	checkTimeoutErr(t, "Acquire on a new connection", errRedial, s.OwnerKey("x"))
	checkTimeoutErr(t, "Count", errRead, s.OwnerKey("u"))

	// Let the resumed server run whatever it was sent, then look.
	_ = once.Close()
	_ = retrying.Close()
	_ = redial.Close()
	waitDrained(t, probe, "stalled-test")
	evalsAfter, _, err := redistest.CommandStats(ctx, probe, "evalsha")
	if err != nil {
		t.Fatal(err)
	}
	// Of the calls made during the stall, those whose EVALSHA was written
	// before they timed out. A retry or a call on a new connection usually
	// never gets that far: its connection set-up (HELLO) times out first.
	t.Logf("the stalled server ran %d EVALSHA after it resumed", evalsAfter-evalsBefore)

	q := open(probe)
	after := ownerState(t, q.set, owners...)
	m3 := Member{"m3", clk.Now().Add(time.Minute)}
	for _, o := range owners {
		landed := equalMembers(after[o], append(before[o][:2:2], m3))
		if !landed && !equalMembers(after[o], before[o]) {
			t.Fatalf("owner %s half-written: before %v, after %v", o, before[o], after[o])
		}
		t.Logf("owner %s: the Acquire that timed out had landed: %v", o, landed)
		d := must[Decision](t)(q.Acquire(ctx, o, "m3", time.Minute))
		if !d.Allowed || d.Existing != landed || d.Count != 3 || !d.Deadline.Equal(m3.Deadline) {
			t.Fatalf("owner %s: retried Acquire %+v; the first had landed: %v", o, d, landed)
		}
		if d := must[Decision](t)(q.Acquire(ctx, o, "m4", time.Minute)); d.Allowed || d.Count != 3 {
			t.Fatalf("owner %s: a fourth member was admitted after the stall: %+v", o, d)
		}
	}
}

// TestFailoverKeepsQuota checks the quota across a master failing (SIGKILL)
// and its replica taking over in a Redis Cluster: once the client has
// followed the new topology (see the ClusterStateReloadInterval note
// below), every admission the replica had received is
// there with its deadline, a full owner is still denied and a retry is still
// Existing.
//
// What it cannot promise: replication is asynchronous. An Acquire that the
// master acknowledged but had not yet sent to its replica when it died is
// lost with it, so the owner may be admitted again: over-admission bounded
// by the admissions acknowledged in that window (typically well under a
// second of writes). WAIT narrows the window to nothing for the writes it
// covers; this test runs it (waitReplicated) before killing the master,
// which is what an application needing this guarantee has to do after its
// Acquire (WAIT on the connection of the write, or a marker write and WAIT
// as here). Even then a failover chosen while the WAIT was still pending
// can lose the write; Redis gives no stronger guarantee.
func TestFailoverKeepsQuota(t *testing.T) {
	redistest.SystemTest(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	// go-redis reloads a ClusterClient's slot map on MOVED and READONLY
	// replies, and otherwise only every ClusterStateReloadInterval (default
	// 60s): a master that died answers nothing, so with the default the
	// client keeps dialling it for up to a minute. Applications that must
	// ride out a failover set the interval short (or call ReloadState on
	// connection errors), as here.
	cc := cl.Client(t, func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second })
	ctx := context.Background()
	s := must[*Set](t)(Open(context.Background(), cc, uniqueName(t, cc)))
	q := must[*Quota](t)(NewQuota(s, 3))
	for i := 1; i <= 3; i++ {
		if d := must[Decision](t)(q.Acquire(ctx, "u", "o"+strconv.Itoa(i), time.Hour)); !d.Allowed {
			t.Fatalf("acquire before the failover: %+v", d)
		}
	}
	before := ownerState(t, s, "u")
	key := s.OwnerKey("u")
	waitReplicated(t, cc, key)

	master := cl.MasterFor(key)
	if master == nil {
		t.Fatalf("no master serves %s", key)
	}
	promoted := cl.KillMaster(t, master)
	t.Logf("killed master %s; replica %s serves %s now", master.Addr, promoted.Addr, key)

	waitHealed(t, "the cluster client follows the failover", faultWait, func() error {
		_, err := s.Count(ctx, "u")
		return err
	})
	if after := ownerState(t, s, "u"); !reflect.DeepEqual(after, before) {
		t.Fatalf("replicated admissions changed by the failover:\nbefore %v\nafter  %v", before, after)
	}
	if d := must[Decision](t)(q.Acquire(ctx, "u", "o4", time.Hour)); d.Allowed || d.Count != 3 {
		t.Fatalf("after the failover a full owner was admitted: %+v", d)
	}
	if d := must[Decision](t)(q.Acquire(ctx, "u", "o1", time.Hour)); !d.Existing || d.Count != 3 {
		t.Fatalf("retry after the failover: %+v", d)
	}
	// The new master takes writes: a release frees a slot for o4.
	if ok := must[bool](t)(q.Release(ctx, "u", "o1")); !ok {
		t.Fatal("release after the failover found nothing")
	}
	if d := must[Decision](t)(q.Acquire(ctx, "u", "o4", time.Hour)); !d.Allowed || d.Count != 3 {
		t.Fatalf("acquire after a release on the new master: %+v", d)
	}
}

// dialSignal is a go-redis hook that reports each new connection a client
// dials on a channel (dropping what nobody waits for).
type dialSignal chan struct{}

func (d dialSignal) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		select {
		case d <- struct{}{}:
		default:
		}
		return next(ctx, network, addr)
	}
}
func (d dialSignal) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d dialSignal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestStalledServerReportsEvictions checks that an eviction is reported
// however the reply of the Acquire that made it is lost. The server is
// paused (SIGSTOP) while an Acquire that must evict is sent; the client's
// read times out and go-redis retries on a new connection, and the server
// is resumed as that retry dials, so the first EVALSHA (already in the
// server's socket buffer) runs first and evicts, and the retry finds the
// member held. The Decision go-redis's retry returns, and that of an
// application's own retry after it, must both name the evicted member.
func TestStalledServerReportsEvictions(t *testing.T) {
	redistest.SystemTest(t)
	srv := redistest.Start(t)
	ctx := context.Background()
	clk := newFakeClock()
	probe := srv.Client(t)
	name := uniqueName(t, probe)
	dialed := make(dialSignal, 1)
	retrying := srv.Client(t, func(o *redis.Options) {
		o.ReadTimeout, o.WriteTimeout, o.MaxRetries = 250*time.Millisecond, 250*time.Millisecond, 5
	})
	retrying.AddHook(dialed)
	q := must[*Quota](t)(NewQuota(must[*Set](t)(Open(context.Background(), retrying, name, WithClock(clk.Now))), 2, WithEvictOldest()))
	for _, m := range []string{"session-1", "session-2"} {
		must[Decision](t)(q.Acquire(ctx, "acct", m, time.Hour))
		clk.Advance(time.Second)
	}
	<-dialed // the pool's first connection
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan error, 1)
	go func() {
		<-dialed // go-redis dials again after the read timed out
		resumed <- srv.Resume()
	}()
	t.Cleanup(func() { _ = srv.Resume() })
	d, err := q.Acquire(ctx, "acct", "session-3", time.Hour)
	if err := <-resumed; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("Acquire across the stall: %v (go-redis's retries should have carried it)", err)
	}
	t.Logf("go-redis's retry saw the first attempt's admission: Existing %v", d.Existing)
	if !d.Allowed || d.Count != 2 || !reflect.DeepEqual(d.Evicted, []string{"session-1"}) {
		t.Fatalf("Acquire across the stall: %+v; want session-1 reported evicted", d)
	}
	d = must[Decision](t)(q.Acquire(ctx, "acct", "session-3", time.Hour))
	if !d.Allowed || !d.Existing || d.Count != 2 || !reflect.DeepEqual(d.Evicted, []string{"session-1"}) {
		t.Fatalf("the application's retry: %+v; want Existing with session-1 reported evicted", d)
	}
	if ok := must[bool](t)(q.set.Contains(ctx, "acct", "session-1")); ok {
		t.Fatal("session-1 still live")
	}
}
