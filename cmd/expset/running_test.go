package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// holdRunning runs a Consume of group WithOwnerConcurrency(cap) on set
// whose handler calls block until the returned release is called, and
// waits until want calls are under way. release lets them end and waits for
// the Consume to return.
func holdRunning(t *testing.T, set *expset.Set, group string, cap, want int) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		running int
	)
	free := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- set.Consume(ctx, group, "holder", func(ctx context.Context, _ expset.Expiry) error {
			mu.Lock()
			running++
			mu.Unlock()
			select {
			case <-free:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, expset.WithOwnerConcurrency(cap), expset.WithConcurrency(8), expset.WithPollInterval(5*time.Millisecond))
	}()
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(free)
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	waitFor(t, "calls running", func() bool { mu.Lock(); defer mu.Unlock(); return running == want })
	return release
}

// TestBinaryGroupsRunning: with a's 2 calls, b's 2, c's 1 and a job's
// under way (WithOwnerConcurrency(2); a's third event held back), groups
// shows 6 running of 3 owners and 1 held back, and groups running lists
// the calls, the oldest first, cut at --top, with the totals; the job's
// row shows "(job)" and its ID. An unknown group is "not found" (exit 3),
// a bad --top a usage error (exit 2). Once the calls end, nothing runs.
func TestBinaryGroupsRunning(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithConsumerGroups("billing"))
	addRunnable(t, rdb, set)
	before := time.Now()
	release := holdRunning(t, set, "billing", 2, 6)
	waitFor(t, "a's third event held back", func() bool {
		r, err := set.Running(context.Background(), "billing", 1)
		return err == nil && r.HeldBack == 1
	})

	code, out, errs := runBin(t, "groups", "--redis", url, "--json", set.Name())
	var rows []groupRowJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Running != 6 || rows[0].RunningOwners != 3 ||
		rows[0].HeldBack != 1 || rows[0].OldestRunning == nil || rows[0].OldestRunning.Before(before.Truncate(time.Millisecond)) {
		t.Fatalf("groups --json: exit %d, %s%s; want billing with 6 calls of 3 owners running, 1 held back", code, out, errs)
	}
	code, out, errs = runBin(t, "groups", "--redis", url, set.Name())
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 ||
		strings.Join(strings.Fields(lines[0]), " ") != "GROUP SHARDS LAG PENDING RETRYING DEAD RUNNING OWNERS HELD BACK PAUSED" ||
		!strings.HasSuffix(strings.Join(strings.Fields(lines[1]), " "), " 6 3 1") {
		t.Errorf("groups: exit %d:\n%s%s", code, out, errs)
	}
	code, out, errs = runBin(t, "groups", "running", "--redis", url, "--top", "2", set.Name(), "billing")
	lines := strings.Split(out, "\n")
	if code != 0 || len(lines) != 5 || strings.Join(strings.Fields(lines[0]), " ") != "OWNER MEMBER ATTEMPT CONSUMER AGE LEASE LEFT" ||
		!strings.HasPrefix(lines[3], "2 of 6 calls running (3 owners); 1 event held back") {
		t.Errorf("groups running --top 2: exit %d:\n%s%s", code, out, errs)
	}
	code, out, errs = runBin(t, "groups", "running", "--redis", url, set.Name(), "billing")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(out), " "), "(job) job-1 1 holder") {
		t.Errorf("groups running: exit %d:\n%s%s\nwant the job's call with its ID", code, out, errs)
	}
	code, out, errs = runBin(t, "groups", "running", "--redis", url, "--json", set.Name(), "billing")
	var r runningJSON
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Running != 6 || r.Owners != 3 || r.HeldBack != 1 || len(r.Calls) != 6 {
		t.Fatalf("groups running --json: exit %d, %s%s", code, out, errs)
	}
	members := map[string]bool{}
	for _, c := range r.Calls {
		members[c.Owner+"/"+c.Member] = true
		if c.Attempt != 1 || c.Consumer != "holder" || c.Started == nil || c.LeaseEnd == nil || c.Started.Before(before.Truncate(time.Millisecond)) || c.ID == "" {
			t.Errorf("groups running --json: call %+v", c)
		}
	}
	if !members["/job-1"] || !members["c/order-1"] || len(members) != 6 {
		t.Errorf("groups running --json: calls of %v, want the job's and c's among 6", members)
	}
	if code, _, errs := runBin(t, "groups", "running", "--redis", url, set.Name(), "nope"); code != 3 {
		t.Errorf("an unknown group: exit %d, %s; want 3", code, errs)
	}
	if code, _, errs := runBin(t, "groups", "running", "--redis", url, "--top", "0", set.Name(), "billing"); code != 2 {
		t.Errorf("--top 0: exit %d, %s; want 2", code, errs)
	}

	release()
	code, out, errs = runBin(t, "groups", "running", "--redis", url, set.Name(), "billing")
	// a's third event, set aside and released as the Consume stopped, is
	// still pending: held back.
	if code != 0 || !strings.HasPrefix(out, "OWNER  MEMBER  ATTEMPT  CONSUMER  AGE  LEASE LEFT\n0 of 0 calls running (0 owners); 1 event held back") {
		t.Errorf("groups running after the calls ended: exit %d:\n%s%s", code, out, errs)
	}
}

// TestWebBrowserRunning: with a's 2 calls, b's 2, c's 1 and a job's under
// way, begun by a Consume whose set's clock runs 10s behind (so they have
// run 10s at once), a set's page shows billing with 6 running of 3 owners
// and 1 held back, and lists the calls, the oldest first, each with its
// age of 10s and more, the job's as "(job)"; once the calls end, the live
// refresh shows none.
func TestWebBrowserRunning(t *testing.T) {
	// Not parallel: chromium takes the machine for a while (two starting
	// at once on a loaded one missed startBrowser's 30s).
	b := startBrowser(t)
	_, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithConsumerGroups("billing"))
	addRunnable(t, rdb, set)
	behind, err := expset.Open(context.Background(), rdb, set.Name(), expset.WithRecordedConfiguration(),
		expset.WithClock(func() time.Time { return time.Now().Add(-10 * time.Second) }))
	if err != nil {
		t.Fatal(err)
	}
	release := holdRunning(t, behind, "billing", 2, 6)
	waitFor(t, "a's third event held back", func() bool {
		r, err := set.Running(context.Background(), "billing", 1)
		return err == nil && r.HeldBack == 1
	})
	base, _, _ := webServe(t, rdb, set, webOpts{})
	b.open(base + "/set?s=" + set.Name())
	row := `#groups tr[data-group="billing"] `
	if r, o, h := b.text(row+`[data-k="running"]`), b.text(row+`[data-k="running-owners"]`), b.text(row+`[data-k="held-back"]`); r != "6" || o != "3" || h != "1" {
		t.Errorf("billing shows %q running of %q owners, %q held back; want 6 of 3, 1", r, o, h)
	}
	var calls []struct {
		Owner, Member, Age, Lease string
		Ms                        int64
	}
	b.eval(`[...document.querySelectorAll('#running table[data-group="billing"] tbody tr')].map(tr => ({
		Owner: tr.querySelector('td').textContent, Member: tr.dataset.member,
		Age: tr.querySelector('[data-k="age"]').textContent, Ms: +tr.querySelector('[data-k="age"]').dataset.ms,
		Lease: tr.querySelector('[data-k="lease"]').textContent}))`, &calls)
	if len(calls) != 6 {
		t.Fatalf("calls shown: %+v, want 6", calls)
	}
	job := false
	for i, c := range calls {
		if c.Ms < 10_000 || c.Ms > 70_000 || !strings.HasSuffix(c.Age, "s") || c.Lease == "lapsed" || c.Lease == "?" {
			t.Errorf("call %d %+v: want an age of 10s or a little more, and a lease running", i, c)
		}
		if i > 0 && c.Ms > calls[i-1].Ms {
			t.Errorf("call %d (%dms) is older than call %d (%dms): want the oldest first", i, c.Ms, i-1, calls[i-1].Ms)
		}
		job = job || (c.Owner == "(job)" && c.Member == "job-1")
	}
	if !job {
		t.Errorf("calls shown: %+v, want the job's as (job)", calls)
	}
	release()
	waitFor(t, "the live refresh showing no call running", func() bool {
		var none bool
		b.eval(`document.querySelector('#groups tr[data-group="billing"] [data-k="running"]').textContent === "0" && document.querySelectorAll("#running table").length === 0`, &none)
		return none
	})
}

// addRunnable gives set expired members, swept into events: 3 of owner a,
// 2 of b and 1 of c, and a job due, job-1.
func addRunnable(t *testing.T, rdb redis.UniversalClient, set *expset.Set) {
	t.Helper()
	addEvents(t, rdb, set, []string{"job-1"}, "a", "a", "a", "b", "b", "c")
}

// addEvents gives set an expired member for each owner named (order-1,
// order-2... of each) and the jobs, due, and sweeps them into events.
func addEvents(t *testing.T, rdb redis.UniversalClient, set *expset.Set, jobs []string, owners ...string) {
	t.Helper()
	old, err := expset.Open(context.Background(), rdb, set.Name(), expset.WithRecordedConfiguration(),
		expset.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, o := range owners {
		seen[o]++
		if _, err := old.Add(context.Background(), o, "order-"+strconv.Itoa(seen[o]), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range jobs {
		if _, _, err := old.Put(context.Background(), id, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	sweepNow(t, set, len(owners)+len(jobs))
}

// TestSingularCounts: with owner a's one call running, its second event
// held back (WithOwnerConcurrency(1)) and owner z paused, the set's page
// and the groups commands put each count of one in the singular: "1 call
// of 1 owner", "1 event held back", "1 owner paused".
func TestSingularCounts(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		set := webTestSet(t, rdb, 2)
		declare(t, rdb, set, "billing")
		addEvents(t, rdb, set, nil, "a", "a")
		if _, err := set.Pause(ctx, "billing", "z"); err != nil {
			t.Fatal(err)
		}
		holdRunning(t, set, "billing", 1, 1)
		var r expset.RunningCalls
		waitFor(t, "a's second event held back", func() bool {
			var err error
			r, err = set.Running(ctx, "billing", 20)
			return err == nil && r.HeldBack == 1
		})

		body := mustGet(t, newWebFix(t, rdb, set, webOpts{}), "/set?s="+set.Name())
		for _, want := range []string{
			"billing: 1 call of 1 owner, the 1 oldest shown; 1 event held back</caption>",
			`<span class="paused">1 owner paused</span>`,
			"billing: 1 owner paused</caption>",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("the set's page does not say %q", want)
			}
		}

		var b strings.Builder
		if err := printRunning(&b, r, time.Now(), false); err != nil || !strings.Contains(b.String(), "\n1 of 1 call running (1 owner); 1 event held back (") {
			t.Errorf("groups running: %v\n%s", err, b.String())
		}
		b.Reset()
		owners, err := set.PausedOwners(ctx, "billing")
		if err != nil {
			t.Fatal(err)
		}
		if err := printPaused(&b, "billing", owners, false); err != nil || b.String() != "z\n1 owner paused in group \"billing\"\n" {
			t.Errorf("groups paused: %v\n%s", err, b.String())
		}
		b.Reset()
		gs, err := set.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := printGroups(&b, gs, false); err != nil || !strings.HasSuffix(b.String(), "  1 owner\n") {
			t.Errorf("groups: %v\n%s", err, b.String())
		}
	})
}
