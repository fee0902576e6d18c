package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// wait is the bound of every wait in these tests: generous, as the machine
// is shared; nothing is asserted about how long anything took.
const wait = 30 * time.Second

// waitFor polls cond until it holds, failing t after wait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(wait); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %s after %v", what, wait)
		}
	}
}

// eventsSet is seeded with expiry events on, over shards shards.
func eventsSet(t *testing.T, shards int) (string, *expset.Set) {
	t.Helper()
	url, _, set := seeded(t, expset.WithShards(shards), expset.WithExpiryEvents())
	return url, set
}

// addExpired gives each owner the member "order-<owner>", whose deadline
// passed about an hour ago, unswept.
func addExpired(t *testing.T, set *expset.Set, rdb redis.UniversalClient, owners ...string) {
	t.Helper()
	ctx := context.Background()
	past := time.Now().Add(-time.Hour)
	old, err := expset.Open(ctx, rdb, set.Name(), expset.WithRecordedConfiguration(), expset.WithClock(func() time.Time { return past }))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		if _, err := old.Add(ctx, o, "order-"+o, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
}

// sweepNow sweeps set in the test process and checks it removed n members.
func sweepNow(t *testing.T, set *expset.Set, n int) {
	t.Helper()
	w, err := expset.NewSweeper(set)
	if err != nil {
		t.Fatal(err)
	}
	st, err := w.SweepOnce(context.Background())
	if err != nil || st.Expired != n {
		t.Fatalf("sweep: %+v, %v; want %d expired", st, err, n)
	}
}

// bury runs a consumer whose handler always fails, with one attempt, until
// n dead letters are there.
func bury(t *testing.T, set *expset.Set, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- set.Consume(ctx, "billing", "test", func(context.Context, expset.Expiry) error {
			return errors.New("always fails")
		}, expset.WithMaxAttempts(1), expset.WithLeaseTTL(200*time.Millisecond), expset.WithPollInterval(5*time.Millisecond))
	}()
	waitFor(t, strconv.Itoa(n)+" dead letters", func() bool {
		ds, err := set.DeadLetters(ctx, allShards, 0)
		return err == nil && len(ds) == n
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// totals runs "stats --json" and returns its totals.
func totals(t *testing.T, url string, set *expset.Set) statsReport {
	t.Helper()
	code, out, errs := runBin(t, "stats", "--json", "--redis", url, set.Name())
	if code != 0 {
		t.Fatalf("stats --json: exit %d: %s", code, errs)
	}
	var rep statsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stats --json is not JSON: %v\n%s", err, out)
	}
	return rep
}

// running is the binary running in the background.
type running struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string // stdout, a line each
	seen   []string    // stdout lines read so far
	stderr syncBuffer
	done   chan struct{}
	code   int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startBin starts the binary; it is killed when t ends if still running.
func startBin(t *testing.T, args ...string) *running {
	t.Helper()
	r := &running{t: t, lines: make(chan string, 10000), done: make(chan struct{})}
	r.cmd = exec.Command(binary(t), args...)
	r.cmd.Env = append(os.Environ(), "REDIS_URL=")
	r.cmd.Stderr = &r.stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
		var ee *exec.ExitError
		if err := r.cmd.Wait(); errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// line reads stdout until a line holding want, and returns it.
func (r *running) line(want string) string {
	r.t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case l, ok := <-r.lines:
			if !ok {
				<-r.done
				r.t.Fatalf("%v exited (%d) before printing %q; stdout:\n%s\nstderr:\n%s", r.cmd.Args[1:], r.code, want, strings.Join(r.seen, "\n"), r.stderr.String())
			}
			r.seen = append(r.seen, l)
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			r.t.Fatalf("%v printed no %q in %v; stdout:\n%s\nstderr:\n%s", r.cmd.Args[1:], want, wait, strings.Join(r.seen, "\n"), r.stderr.String())
		}
	}
}

// interrupt sends SIGINT and returns the exit code and the rest of stdout.
func (r *running) interrupt() (int, string) {
	r.t.Helper()
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		r.t.Fatal(err)
	}
	var rest []string
	timeout := time.After(wait)
	for {
		select {
		case l, ok := <-r.lines:
			if ok {
				rest = append(rest, l)
				continue
			}
			<-r.done
			return r.code, strings.Join(rest, "\n")
		case <-timeout:
			r.t.Fatalf("%v still running %v after SIGINT", r.cmd.Args[1:], wait)
		}
	}
}

// totalLine returns the fields of the "total" line of stats' text output.
func totalLine(t *testing.T, out string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 11 && f[0] == "total" {
			return f
		}
	}
	t.Fatalf("no total line:\n%s", out)
	return nil
}

func TestBinaryStats(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(4), expset.WithExpiryEvents())
	ctx := context.Background()
	for _, o := range []string{"u1", "u2", "u3"} {
		if _, err := set.Add(ctx, o, "live", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	addExpired(t, set, rdb, "e1", "e2", "e3", "e4", "e5")

	code, out, errs := runBin(t, "stats", "--redis", url, set.Name())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"set " + set.Name() + " at ", "4 shards, expiry events on",
		"SHARD", "OWNERS", "OWNERS DUE", "MEMBERS DUE", "JOBS DUE", "LAG", "EVENTS", "PENDING", "RETRYING", "DEAD", "LEASE"} {
		if !strings.Contains(out, want) {
			t.Errorf("stats lacks %q:\n%s", want, out)
		}
	}
	// total, owners, owners due, members due, jobs due, lag, events, pending, retrying, dead, lease
	if f := totalLine(t, out); f[1] != "8" || f[2] != "5" || f[3] != "5" || f[4] != "0" || f[5] == "-" || f[6] != "0" || f[8] != "0" || f[9] != "0" || f[10] != "0/4" {
		t.Errorf("before the sweep, total line %q:\n%s", f, out)
	}
	// Members due and no sweeper: the shards holding them are stalled.
	if !strings.Contains(out, "none!") || !strings.Contains(out, "! no sweeper running: 5 due (members and jobs) on ") {
		t.Errorf("stats with members due and no sweeper does not say so:\n%s", out)
	}
	rep := totals(t, url, set)
	if tot := rep.Total; len(rep.Shards) != 4 || tot.Owners != 8 || tot.OwnersDue != 5 || tot.MembersDue != 5 || tot.OldestDue == nil || tot.LagMS <= 0 || tot.Events != 0 || rep.Total.Stalled == 0 {
		t.Errorf("before the sweep: %+v", rep)
	}
	sum := int64(0)
	for _, s := range rep.Shards {
		sum += s.MembersDue
	}
	if sum != 5 || rep.Set != set.Name() || !rep.Events {
		t.Errorf("shards add up to %d members due; report %+v", sum, rep)
	}

	sweepNow(t, set, 5)
	rep = totals(t, url, set)
	if tot := rep.Total; tot.Owners != 3 || tot.OwnersDue != 0 || tot.MembersDue != 0 || tot.OldestDue != nil || tot.LagMS != 0 || tot.Events != 5 || tot.Dead != 0 || rep.Total.Stalled != 0 {
		t.Errorf("after the sweep: %+v", tot)
	}
	_, out, _ = runBin(t, "stats", "--redis", url, set.Name())
	if f := totalLine(t, out); f[3] != "0" || f[5] != "-" || f[6] != "5" {
		t.Errorf("after the sweep, total line %q", f)
	}

	bury(t, set, 5)
	rep = totals(t, url, set)
	if tot := rep.Total; tot.Dead != 5 || tot.Events != 0 || tot.Pending != 0 {
		t.Errorf("with dead letters: %+v", tot)
	}
	_, out, _ = runBin(t, "stats", set.Name(), "--redis", url) // flags after the name work too
	if f := totalLine(t, out); f[9] != "5" {
		t.Errorf("with dead letters, total line %q", f)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stats", "--redis", url, "no-such-set"}, 3, "no set"},
		{[]string{"stats", "--redis", url}, 2, "want NAME"},
		{[]string{"stats", "--redis", url, "--watch=1ms", set.Name()}, 2, "--watch"},
		{[]string{"stats", "--redis", url, "--serve", ":0", "--json", set.Name()}, 2, "--serve goes without"},
	} {
		code, _, errs := runBin(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("expset %v: exit %d, %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}

func TestBinaryStatsWatch(t *testing.T) {
	t.Parallel()
	url, set := eventsSet(t, 2)
	r := startBin(t, "stats", "--redis", url, "--watch=100ms", set.Name())
	r.line("set " + set.Name() + " at ")
	r.line("set " + set.Name() + " at ") // a second block
	if code, _ := r.interrupt(); code != 0 {
		t.Fatalf("--watch exit %d after SIGINT: %s", code, r.stderr.String())
	}

	r = startBin(t, "stats", "--redis", url, "--watch=100ms", "--json", set.Name())
	var rep statsReport
	if err := json.Unmarshal([]byte(r.line(`"set"`)), &rep); err != nil || rep.Set != set.Name() || len(rep.Shards) != 2 {
		t.Fatalf("--watch --json line: %+v, %v", rep, err)
	}
	if code, _ := r.interrupt(); code != 0 {
		t.Fatalf("--watch --json exit %d after SIGINT: %s", code, r.stderr.String())
	}
}

func TestBinaryStatsServe(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(4), expset.WithExpiryEvents(), expset.WithConsumerGroups("g"))
	addExpired(t, set, rdb, "a", "b", "c")
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	r := startBin(t, "stats", "--redis", url, "--serve", addr, set.Name())

	client := &http.Client{Timeout: 5 * time.Second}
	var body string
	waitFor(t, "answer on /metrics", func() bool {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == http.StatusOK
	})
	for _, name := range []string{"shard_owners", "shard_owners_due", "shard_members_due", "shard_members_due_partial", "shard_lag_seconds",
		"shard_events", "shard_events_trimmed", "shard_pending", "shard_retries_scheduled", "shard_dead_letters", "shard_lease_held",
		"shard_server_evicted_keys", "group_lag", "group_pending", "group_retries_scheduled", "group_dead_letters", "group_running",
		"group_running_owners", "group_oldest_running_seconds", "group_held_back"} {
		for _, want := range []string{"# HELP expset_" + name + " ", "# TYPE expset_" + name + " gauge\n"} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	}
	sample := regexp.MustCompile(`(?m)^expset_shard_members_due\{set="` + regexp.QuoteMeta(set.Name()) + `",shard="(\d)"\} (\d+)$`)
	got := map[string]string{}
	for _, m := range sample.FindAllStringSubmatch(body, -1) {
		got[m[1]] = m[2]
	}
	for shard := 0; shard < 4; shard++ {
		want := 0
		for _, o := range []string{"a", "b", "c"} {
			if set.ShardOf(o) == shard {
				want++
			}
		}
		if got[strconv.Itoa(shard)] != strconv.Itoa(want) {
			t.Errorf("shard %d: expset_shard_members_due %q, want %d\n%s", shard, got[strconv.Itoa(shard)], want, body)
		}
	}
	if !strings.Contains(body, `expset_shard_owners{set="`+set.Name()+`",shard="`+strconv.Itoa(set.ShardOf("a"))+`"} `) {
		t.Errorf("no expset_shard_owners sample:\n%s", body)
	}

	// Refreshed per scrape: after a sweep nothing is due.
	sweepNow(t, set, 3)
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := sample.FindAllStringSubmatch(string(b), -1); len(m) != 4 || slices.ContainsFunc(m, func(s []string) bool { return s[2] != "0" }) {
		t.Errorf("after the sweep, members due %q", m)
	}
	if !strings.Contains(string(b), `expset_shard_events{set="`+set.Name()+`",shard="`+strconv.Itoa(set.ShardOf("a"))+`"} `) {
		t.Errorf("no expset_shard_events sample:\n%s", b)
	}
	if !strings.Contains(string(b), `expset_group_lag{group="g",set="`+set.Name()+`"} 3`+"\n") {
		t.Errorf("no expset_group_lag sample of the 3 events swept:\n%s", b)
	}

	if code, _ := r.interrupt(); code != 0 {
		t.Fatalf("--serve exit %d after SIGINT: %s", code, r.stderr.String())
	}
}

var membersRemoved = regexp.MustCompile(`members removed\s+(\d+)`)

func TestBinarySweepOnce(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(4), expset.WithExpiryEvents())
	if _, err := set.Add(context.Background(), "live-user", "live", time.Hour); err != nil {
		t.Fatal(err)
	}
	addExpired(t, set, rdb, "a", "b", "c", "d", "e", "f")
	code, out, errs := runBin(t, "sweep", "--redis", url, "--once", set.Name())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if m := membersRemoved.FindStringSubmatch(out); m == nil || m[1] != "6" || !strings.Contains(out, "swept once") ||
		!regexp.MustCompile(`shards swept\s+4`).MatchString(out) || !strings.Contains(out, "lateness") {
		t.Errorf("sweep --once output:\n%s", out)
	}
	if tot := totals(t, url, set).Total; tot.MembersDue != 0 || tot.Events != 6 || tot.Owners != 1 {
		t.Errorf("after sweep --once: %+v", tot)
	}

	addExpired(t, set, rdb, "g", "h")
	code, out, errs = runBin(t, "sweep", "--redis", url, "--once", "--json", set.Name())
	if code != 0 {
		t.Fatalf("--json exit %d: %s", code, errs)
	}
	var sum sweepSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	if !sum.Once || sum.Set != set.Name() || sum.Expired != 2 || sum.Owners != 2 || sum.Shards != 4 || sum.Skipped != 0 || sum.MaxLateMS <= 0 || sum.Interrupted {
		t.Errorf("--json summary %+v", sum)
	}

	code, _, errs = runBin(t, "sweep", "--redis", url, "--once", "--lease-ttl", "1ms", set.Name())
	if code != 2 || !strings.Contains(errs, "WithLeaseTTL") {
		t.Errorf("--lease-ttl 1ms: exit %d, %q; want exit 2", code, errs)
	}
	code, _, errs = runBin(t, "sweep", "--redis", url, "--once", "no-such-set")
	if code != 3 {
		t.Errorf("unknown set: exit %d, %q; want 3", code, errs)
	}
}

// TestBinarySweepRetention: --retain-len bounds the streams the sweep
// writes, and stats counts what it trimmed.
func TestBinarySweepRetention(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(1), expset.WithExpiryEvents())
	addExpired(t, set, rdb, "a", "b", "c", "d", "e")
	code, _, errs := runBin(t, "sweep", "--redis", url, "--once", "--retain-len", "2", set.Name())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if tot := totals(t, url, set).Total; tot.Events != 2 || tot.Trimmed != 3 {
		t.Errorf("after sweep --once --retain-len 2: %+v, want 2 events and 3 trimmed", tot)
	}
	code, _, errs = runBin(t, "sweep", "--redis", url, "--once", "--retain-len", "0", set.Name())
	if code != 2 || !strings.Contains(errs, "WithEventRetention") {
		t.Errorf("--retain-len 0: exit %d, %q; want exit 2", code, errs)
	}
}

func TestBinarySweepRun(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(4), expset.WithExpiryEvents())
	addExpired(t, set, rdb, "a", "b", "c")
	r := startBin(t, "sweep", "--redis", url, "--progress", "50ms", "--poll-interval", "50ms", set.Name())
	r.line("until interrupted")
	if l := r.line("swept 3 members"); !strings.Contains(l, "/s, lag ") {
		t.Errorf("progress line %q", l)
	}
	// It keeps sweeping what expires later.
	addExpired(t, set, rdb, "d")
	r.line("swept 4 members")
	code, rest := r.interrupt()
	if code != 0 {
		t.Fatalf("exit %d after SIGINT: %s", code, r.stderr.String())
	}
	if m := membersRemoved.FindStringSubmatch(rest); m == nil || m[1] != "4" || !strings.Contains(rest, "swept until interrupted") {
		t.Errorf("summary after SIGINT:\n%s", rest)
	}
	if tot := totals(t, url, set).Total; tot.Events != 4 || tot.Leased != 0 {
		t.Errorf("after the sweeper stopped: %+v (leases released?)", tot)
	}
}

func TestBinaryEventsTail(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(4), expset.WithExpiryEvents())
	text := startBin(t, "events", "tail", "--redis", url, set.Name())
	js := startBin(t, "events", "tail", "--redis", url, "--json", set.Name())
	text.line("tailing expiry events of set " + set.Name())
	waitFor(t, "tail --json to start", func() bool { return strings.Contains(js.stderr.String(), "tailing expiry events") })

	addExpired(t, set, rdb, "tail-user")
	sweepNow(t, set, 1)
	shard := strconv.Itoa(set.ShardOf("tail-user"))
	if l := text.line("member=order-tail-user"); !strings.Contains(l, "owner=tail-user") || !strings.Contains(l, "shard="+shard+" ") || !strings.Contains(l, "late=") {
		t.Errorf("tail line %q", l)
	}
	var e tailLine
	if err := json.Unmarshal([]byte(js.line("order-tail-user")), &e); err != nil || e.Owner != "tail-user" || e.Shard != set.ShardOf("tail-user") || e.ID == "" || e.Deadline.IsZero() {
		t.Errorf("tail --json line %+v, %v", e, err)
	}
	for _, r := range []*running{text, js} {
		if code, _ := r.interrupt(); code != 0 {
			t.Errorf("tail exit %d after SIGINT: %s", code, r.stderr.String())
		}
	}
	// Tailing consumed nothing: the event still waits, not pending.
	if tot := totals(t, url, set).Total; tot.Events != 1 || tot.Pending != 0 {
		t.Errorf("after tail: %+v", tot)
	}
	// --backlog shows what already waits.
	r := startBin(t, "events", "tail", "--redis", url, set.Name(), "--backlog")
	r.line("member=order-tail-user")
	if code, _ := r.interrupt(); code != 0 {
		t.Errorf("tail --backlog exit %d: %s", code, r.stderr.String())
	}
}

func TestBinaryEventsDead(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(4), expset.WithExpiryEvents())
	addExpired(t, set, rdb, "d1", "d2", "d3")
	sweepNow(t, set, 3)
	bury(t, set, 3)

	code, out, errs := runBin(t, "events", "dead", "--redis", url, set.Name())
	if code != 0 {
		t.Fatalf("dead: exit %d: %s", code, errs)
	}
	for _, want := range []string{"SHARD", "ID", "OWNER", "MEMBER", "DEADLINE", "ATTEMPTS", "BURIED", "LAST ERROR",
		"order-d1", "order-d2", "order-d3", `"always fails"`, "3 dead letters"} {
		if !strings.Contains(out, want) {
			t.Errorf("dead lacks %q:\n%s", want, out)
		}
	}
	dead := func() []deadLine {
		t.Helper()
		code, out, errs := runBin(t, "events", "dead", "--redis", url, "--json", set.Name())
		if code != 0 {
			t.Fatalf("dead --json: exit %d: %s", code, errs)
		}
		var ds []deadLine
		if err := json.Unmarshal([]byte(out), &ds); err != nil {
			t.Fatalf("dead --json is not JSON: %v\n%s", err, out)
		}
		return ds
	}
	ds := dead()
	if len(ds) != 3 {
		t.Fatalf("dead --json: %+v", ds)
	}
	for _, d := range ds {
		if d.Attempts != 1 || d.Error != "always fails" || d.Group != "billing" || d.Shard != set.ShardOf(d.Owner) || d.Member != "order-"+d.Owner {
			t.Errorf("dead letter %+v", d)
		}
	}
	ref := func(d deadLine) string { return strconv.Itoa(d.Shard) + "/" + d.ID }

	// Kick one: it leaves the dead letters and waits on its stream again.
	code, out, errs = runBin(t, "events", "kick", "--redis", url, set.Name(), ref(ds[0]))
	if code != 0 || !strings.Contains(out, "kicked 1 dead letter of") || !strings.Contains(out, ds[0].Member) {
		t.Fatalf("kick: exit %d, %q, %q", code, out, errs)
	}
	if tot := totals(t, url, set).Total; tot.Dead != 2 || tot.Events != 1 {
		t.Errorf("after kick: %+v", tot)
	}
	// A missing ID: exit 3, naming the key, and nothing changes.
	for _, args := range [][]string{{"kick", "1-0"}, {"kick", ref(ds[1]), ref(ds[0])}, {"drop", "2/1-0"}} {
		code, _, errs = runBin(t, append([]string{"events", args[0], "--redis", url, set.Name()}, args[1:]...)...)
		if code != 3 || !strings.Contains(errs, "no dead letter") || !strings.Contains(errs, ":dead") || !strings.Contains(errs, "nothing changed") {
			t.Errorf("%v: exit %d, %q; want exit 3", args, code, errs)
		}
	}
	if n := len(dead()); n != 2 {
		t.Fatalf("a failed kick changed the dead letters: %d left", n)
	}

	code, _, errs = runBin(t, "events", "drop", "--redis", url, set.Name(), "--all")
	if code != 2 || !strings.Contains(errs, "--yes") {
		t.Errorf("drop --all without --yes: exit %d, %q", code, errs)
	}
	code, out, errs = runBin(t, "events", "drop", "--redis", url, set.Name(), ref(ds[1]))
	if code != 0 || !strings.Contains(out, "deleted 1 dead letter of") {
		t.Fatalf("drop: exit %d, %q, %q", code, out, errs)
	}
	code, out, errs = runBin(t, "events", "drop", "--redis", url, "--json", set.Name(), "--all", "--yes")
	var res kickResult
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Action != "drop" || res.Done != 1 || len(res.Letters) != 1 || res.Letters[0].ID != ds[2].ID {
		t.Fatalf("drop --all --yes --json: exit %d, %+v, %v, %q", code, res, err, errs)
	}
	if _, out, _ = runBin(t, "events", "dead", "--redis", url, set.Name()); !strings.Contains(out, "no dead letters") {
		t.Errorf("dead after drop --all:\n%s", out)
	}
	if tot := totals(t, url, set).Total; tot.Dead != 0 || tot.Events != 1 {
		t.Errorf("at the end: %+v", tot)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"kick", set.Name(), "bogus"}, 2, "not a dead letter's ID"},
		{[]string{"kick", set.Name()}, 2, "IDs, --all or --job"},
		{[]string{"kick", set.Name(), "--all", "1-0"}, 2, "IDs, --all or --job"},
		{[]string{"tail", set.Name(), "1-0"}, 2, "want NAME, got 2 arguments: expset events tail"},
		{[]string{"tail", set.Name(), "--yes"}, 2, "unknown flag: --yes (run 'expset events tail --help'"},
		{[]string{"peek", set.Name()}, 2, `unknown verb "peek": want tail, dead, kick or drop`},
		{[]string{set.Name(), "peek"}, 2, `unknown verb "`},
		{nil, 2, "want a verb: tail, dead, kick or drop"},
		{[]string{"dead", "no-such-set"}, 3, "no set"},
		{[]string{set.Name(), "kick", "bogus"}, 2, `unknown verb "`},
	} {
		code, _, errs := runBin(t, append([]string{"events", "--redis", url}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("events %v: exit %d, %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
	plainURL, _, plain := seeded(t)
	if code, _, errs := runBin(t, "events", "dead", "--redis", plainURL, plain.Name()); code != 1 || !strings.Contains(errs, "without WithExpiryEvents") {
		t.Errorf("a set without events: exit %d, %q", code, errs)
	}
}

func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"demo", "inspect", "stats", "sweep", "events"} {
		code, _, errs := runCLI(t, cmd, "--help")
		if code != 0 || !strings.Contains(errs, "Example:\n  expset "+cmd) || !strings.Contains(errs, "-redis") {
			t.Errorf("%s --help: exit %d, %q", cmd, code, errs)
		}
	}
	code, out, _ := runCLI(t, "help")
	for _, cmd := range []string{"stats", "sweep", "events"} {
		if code != 0 || !strings.Contains(out, "  "+cmd+" ") {
			t.Errorf("help lacks %s: %q", cmd, out)
		}
	}
}

// TestFlagsAnywhere: flags may come before, between or after the
// arguments; after "--" everything is an argument.
func TestFlagsAnywhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "--json", "n", "--serve", ":0"}, "--serve goes without --watch and --json"},
		{[]string{"stats", "n", "--serve=:0", "--json"}, "--serve goes without --watch and --json"},
		{[]string{"stats", "--serve", ":0", "n", "--watch"}, "--serve goes without --watch and --json"},
		{[]string{"stats", "n", "--", "--json"}, `want NAME, got 2 arguments`},
		{[]string{"stats", "n", "--nope"}, "unknown flag: --nope"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("expset %q: exit %d, %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestBinaryOnCluster runs the operator commands on a three-master Redis
// Cluster: every shard's keys lie in their own slot, so each command must
// go shard by shard.
func TestBinaryOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	rdb := cluster.Client(t)
	url := strings.Join(cluster.Addrs(), ",")
	name := "cli-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	set, err := expset.Open(context.Background(), rdb, name, expset.WithShards(6), expset.WithExpiryEvents())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { expset.Drop(context.Background(), rdb, name) })
	owners := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	addExpired(t, set, rdb, owners...)

	if tot := totals(t, url, set).Total; tot.MembersDue != 8 {
		t.Fatalf("stats on the cluster: %+v", tot)
	}
	tail := startBin(t, "events", "tail", "--redis", url, name)
	tail.line("tailing expiry events")
	code, out, errs := runBin(t, "sweep", "--redis", url, "--once", name)
	if m := membersRemoved.FindStringSubmatch(out); code != 0 || m == nil || m[1] != "8" {
		t.Fatalf("sweep --once on the cluster: exit %d, %s%s", code, out, errs)
	}
	seen := map[string]bool{}
	for len(seen) < len(owners) {
		l := tail.line("owner=")
		_, o, _ := strings.Cut(l, "owner=")
		o, _, _ = strings.Cut(o, " ")
		seen[o] = true
	}
	if code, _ := tail.interrupt(); code != 0 {
		t.Errorf("tail exit %d: %s", code, tail.stderr.String())
	}
	bury(t, set, 8)
	code, out, errs = runBin(t, "events", "kick", "--redis", url, name, "--all")
	if code != 0 || !strings.Contains(out, "kicked 8 dead letters") {
		t.Fatalf("kick --all on the cluster: exit %d, %s%s", code, out, errs)
	}
	if tot := totals(t, url, set).Total; tot.Dead != 0 || tot.Events != 8 {
		t.Errorf("after kick --all: %+v", tot)
	}
}

func TestBinaryStatsPartialCount(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(1), expset.WithExpiryEvents())
	owners := make([]string, statsOwnerScan+1)
	for i := range owners {
		owners[i] = "o" + strconv.Itoa(i)
	}
	addExpired(t, set, rdb, owners...)
	code, out, errs := runBin(t, "stats", "--redis", url, set.Name())
	if f := totalLine(t, out); code != 0 || f[2] != "1001" || f[3] != "1000+" || !strings.Contains(out, "counted over the first 1000 due owners") {
		t.Errorf("exit %d, total line %q:\n%s%s", code, f, out, errs)
	}
	if rep := totals(t, url, set); !rep.Total.Partial || !rep.Shards[0].Partial || rep.Total.MembersDue != 1000 {
		t.Errorf("--json: %+v", rep.Total)
	}
}

// TestBinaryGroups: groups lists a set's consumer groups with what each has
// to do; groups remove removes one with what it held, and a group that is
// not there is "not found" (exit 3).
func TestBinaryGroups(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithConsumerGroups("keep", "typo"))
	addExpired(t, set, rdb, "a", "b", "c")
	if code, _, errs := runBin(t, "sweep", "--redis", url, "--once", set.Name()); code != 0 {
		t.Fatalf("sweep: exit %d: %s", code, errs)
	}
	list := func() []groupRowJSON {
		t.Helper()
		code, out, errs := runBin(t, "groups", "--redis", url, "--json", set.Name())
		if code != 0 {
			t.Fatalf("groups: exit %d: %s", code, errs)
		}
		var rows []groupRowJSON
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("groups --json: %v: %s", err, out)
		}
		return rows
	}
	if rows := list(); len(rows) != 2 || rows[0].Group != "keep" || rows[1].Group != "typo" || rows[1].Lag != 3 || rows[1].Shards != 2 {
		t.Fatalf("groups: %+v, want keep and typo, each 3 events behind on 2 shards", rows)
	}
	code, out, errs := runBin(t, "groups", "remove", "--redis", url, set.Name(), "typo")
	if code != 0 || !strings.Contains(out, `removed group "typo" from 2 shards`) {
		t.Fatalf("groups remove: exit %d, %q, %s", code, out, errs)
	}
	if rows := list(); len(rows) != 1 || rows[0].Group != "keep" {
		t.Fatalf("after remove: %+v, want keep alone", rows)
	}
	if code, _, errs := runBin(t, "groups", "remove", "--redis", url, set.Name(), "typo"); code != 3 {
		t.Errorf("second remove: exit %d, %q; want 3", code, errs)
	}
	if code, _, errs := runBin(t, "groups", "remove", "--redis", url, set.Name()); code != 2 {
		t.Errorf("remove without GROUP: exit %d, %q; want 2", code, errs)
	}
}
