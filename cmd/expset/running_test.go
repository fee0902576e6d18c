package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// holdRunning runs a Consume of group WithOwnerConcurrency(cap) whose
// handler calls block until the returned release is called, and waits
// until want calls are under way. release lets them end and waits for the
// Consume to return.
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

// TestBinaryGroupsRunning: with a's 2 calls, b's 2 and c's 1 under way
// (WithOwnerConcurrency(2)), groups shows 5 running of 3 owners, and groups
// running lists the owners, most first, cut at --top, with the totals; an
// unknown group is "not found" (exit 3), a bad --top a usage error (exit
// 2). Once the calls end, nothing runs.
func TestBinaryGroupsRunning(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithConsumerGroups("billing"))
	addRunnable(t, rdb, set)
	release := holdRunning(t, set, "billing", 2, 5)

	code, out, errs := runBin(t, "groups", "--redis", url, "--json", set.Name())
	var rows []groupRowJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Running != 5 || rows[0].RunningOwners != 3 {
		t.Fatalf("groups --json: exit %d, %s%s; want billing with 5 calls of 3 owners running", code, out, errs)
	}
	code, out, errs = runBin(t, "groups", "--redis", url, set.Name())
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 ||
		strings.Join(strings.Fields(lines[0]), " ") != "GROUP SHARDS LAG PENDING RETRYING DEAD RUNNING OWNERS" ||
		!strings.HasSuffix(strings.Join(strings.Fields(lines[1]), " "), " 5 3") {
		t.Errorf("groups: exit %d:\n%s%s", code, out, errs)
	}
	code, out, errs = runBin(t, "groups", "running", "--redis", url, "--top", "2", set.Name(), "billing")
	want := "OWNER  RUNNING\na      2\nb      2\n2 of 3 owners with calls running (5 calls)\n"
	if code != 0 || out != want {
		t.Errorf("groups running --top 2: exit %d:\n%s%s\nwant:\n%s", code, out, errs, want)
	}
	code, out, errs = runBin(t, "groups", "running", "--redis", url, "--json", set.Name(), "billing")
	var owners []ownerRowJSON
	if code != 0 || json.Unmarshal([]byte(out), &owners) != nil || len(owners) != 3 || owners[2] != (ownerRowJSON{Owner: "c", Running: 1}) {
		t.Errorf("groups running --json: exit %d, %s%s", code, out, errs)
	}
	if code, _, errs := runBin(t, "groups", "running", "--redis", url, set.Name(), "nope"); code != 3 {
		t.Errorf("an unknown group: exit %d, %s; want 3", code, errs)
	}
	if code, _, errs := runBin(t, "groups", "running", "--redis", url, "--top", "0", set.Name(), "billing"); code != 2 {
		t.Errorf("--top 0: exit %d, %s; want 2", code, errs)
	}

	release()
	code, out, errs = runBin(t, "groups", "running", "--redis", url, set.Name(), "billing")
	if code != 0 || out != "OWNER  RUNNING\n0 of 0 owners with calls running (0 calls)\n" {
		t.Errorf("groups running after the calls ended: exit %d:\n%s%s", code, out, errs)
	}
}

// TestWebBrowserRunning: with a's 2 calls, b's 2 and c's 1 under way, a
// set's page shows billing with 5 running of 3 owners and lists the owners,
// most first; once the calls end, the live refresh shows none.
func TestWebBrowserRunning(t *testing.T) {
	// Not parallel: chromium takes the machine for a while (two starting
	// at once on a loaded one missed startBrowser's 30s).
	b := startBrowser(t)
	_, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithConsumerGroups("billing"))
	addRunnable(t, rdb, set)
	release := holdRunning(t, set, "billing", 2, 5)
	base, _, _ := webServe(t, rdb, set, webOpts{})
	b.open(base + "/set?s=" + set.Name())
	row := `#groups tr[data-group="billing"] `
	if r, o := b.text(row+`[data-k="running"]`), b.text(row+`[data-k="running-owners"]`); r != "5" || o != "3" {
		t.Errorf("billing shows %q running of %q owners; want 5 of 3", r, o)
	}
	var owners []string
	b.eval(`[...document.querySelectorAll('#running table[data-group="billing"] tbody tr')].map(tr => tr.dataset.owner + " " + tr.querySelector('[data-k="calls"]').textContent)`, &owners)
	if want := []string{"a 2", "b 2", "c 1"}; strings.Join(owners, ",") != strings.Join(want, ",") {
		t.Errorf("owners running shown %q; want %q", owners, want)
	}
	release()
	waitFor(t, "the live refresh showing no call running", func() bool {
		var none bool
		b.eval(`document.querySelector('#groups tr[data-group="billing"] [data-k="running"]').textContent === "0" && document.querySelectorAll("#running table").length === 0`, &none)
		return none
	})
}

// addRunnable gives set expired members, swept into events: 3 of owner a,
// 2 of b and 1 of c.
func addRunnable(t *testing.T, rdb redis.UniversalClient, set *expset.Set) {
	t.Helper()
	old, err := expset.Open(context.Background(), rdb, set.Name(), expset.WithRecordedConfiguration(),
		expset.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range [][2]string{{"a", "1"}, {"a", "2"}, {"a", "3"}, {"b", "1"}, {"b", "2"}, {"c", "1"}} {
		if _, err := old.Add(context.Background(), m[0], "order-"+m[1], time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	sweepNow(t, set, 6)
}
