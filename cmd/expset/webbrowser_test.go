package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// webServe serves set on a free loopback port, sampling its counters, until
// t ends; it returns the page's base URL.
func webServe(t *testing.T, rdb redis.UniversalClient, set *expset.Set, o webOpts) (string, *webServer, *syncBuffer) {
	t.Helper()
	o.listen = "127.0.0.1:0"
	loopback, err := checkWebOpts(o)
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	srv, err := newWebServer(context.Background(), &conn{rdb: rdb, desc: "test Redis"}, []string{set.Name()}, o, loopback, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), srv, log
}

// fillForBrowser gives set, on a real server: live members of 40 owners,
// 20 dead letters of group billing (one with a JSON payload), 10 events
// waiting for billing and 5 expired members not yet swept.
func fillForBrowser(t *testing.T, rdb *redis.Client, set *expset.Set) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		if _, err := set.Add(ctx, fmt.Sprintf("user-%d", i%40), fmt.Sprintf("order-%d", i), time.Hour, expset.WithPayload([]byte("0123456789"))); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-time.Hour)
	old, err := expset.Open(ctx, rdb, set.Name(), expset.WithRecordedConfiguration(), expset.WithClock(func() time.Time { return past }))
	if err != nil {
		t.Fatal(err)
	}
	expired := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			o := fmt.Sprintf("%s-%d", prefix, i)
			if _, err := old.Add(ctx, o, "order-"+o, time.Minute, expset.WithPayload([]byte(`{"order":"`+o+`","cents":1250}`))); err != nil {
				t.Fatal(err)
			}
		}
	}
	expired("buried", 20)
	sweepNow(t, set, 20)
	bury(t, set, 20)
	expired("waiting", 10)
	sweepNow(t, set, 10)
	expired("due", 5)
}

// shownNumbers reads the shards table of a set's page: per shard, its
// data-k cells as numbers (digits only; "held" is 1), plus "leased".
func shownNumbers(b *browser) []map[string]int64 {
	var rows []map[string]string
	b.eval(`[...document.querySelectorAll("#shards tbody tr")].map(tr => {
		const o = {shard: tr.dataset.shard};
		tr.querySelectorAll("[data-k]").forEach(td => { o[td.dataset.k] = td.textContent.trim(); });
		return o;
	})`, &rows)
	var out []map[string]int64
	for _, r := range rows {
		m := map[string]int64{}
		for k, v := range r {
			if k == "leased" {
				m[k] = map[bool]int64{true: 1}[v == "held"]
				continue
			}
			digits := strings.Map(func(r rune) rune {
				if r >= '0' && r <= '9' {
					return r
				}
				return -1
			}, v)
			m[k], _ = strconv.ParseInt(digits, 10, 64)
		}
		out = append(out, m)
	}
	return out
}

func TestWebBrowser(t *testing.T) {
	// Not parallel: chromium takes the machine for a while (two starting
	// at once on a loaded one missed startBrowser's 30s).
	b := startBrowser(t)
	addr := redistest.Addr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	name := "web-" + uuid.NewString()[:8]
	set, err := expset.Open(ctx, rdb, name, expset.WithShards(4), expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { expset.Drop(context.Background(), rdb, name) })
	fillForBrowser(t, rdb, set)
	nightly := putSchedules(t, set)

	// Read-only: the numbers shown are the library's.
	base, _, _ := webServe(t, rdb, set, webOpts{})
	b.open(base + "/set?s=" + name)
	shown := shownNumbers(b)
	st, err := set.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(shown) != len(st) {
		t.Fatalf("the page shows %d shards; Stats has %d", len(shown), len(st))
	}
	var total expset.ShardStats
	for i, s := range st {
		want := map[string]int64{"shard": int64(s.Shard), "owners": s.Owners, "owners-due": s.OwnersDue, "members-due": s.MembersDue, "jobs-due": s.JobsDue,
			"events": s.Events, "pending": s.Pending, "dead": s.Dead, "leased": map[bool]int64{true: 1}[s.Leased]}
		for k, v := range want {
			if shown[i][k] != v {
				t.Errorf("shard %d %s: the page shows %d, Stats says %d", i, k, shown[i][k], v)
			}
		}
		total.MembersDue += s.MembersDue
		total.Dead += s.Dead
		total.Events += s.Events
	}
	if total.MembersDue != 5 || total.Dead != 20 || total.Events != 10 {
		t.Fatalf("the fill went wrong: %+v", total)
	}
	if got := b.text(`#totals [data-k="dead"]`); got != "20" {
		t.Errorf("total dead letters shown %q; want 20", got)
	}
	// Members due and no sweeper running: the page says so.
	if got := b.text(`#sweeping`); !strings.Contains(got, "no sweeper running: 5 due (members and jobs) on ") {
		t.Errorf("with members due and no sweeper the page shows %q; want the warning", got)
	}
	if got := b.text(`#groups tr[data-group="billing"] [data-k="lag"]`); got != "10" {
		t.Errorf("billing's lag shown %q; want 10", got)
	}
	// The schedules, with their next tick (none while paused).
	if got, want := b.text(`#schedules tr[data-schedule="nightly"] [data-k="next"]`), nightly.UTC().Format("2006-01-02 15:04:05.000Z"); !strings.HasPrefix(got, want+" in ") {
		t.Errorf("nightly's next tick shown %q; want %s in ...", got, want)
	}
	if got := b.text(`#schedules tr[data-schedule="beat"] [data-k="next"]`); got != "paused" {
		t.Errorf("beat's next tick shown %q; want paused", got)
	}
	if got := b.text(`#schedules tr[data-schedule="beat"] [data-k="last"]`); got != "–" {
		t.Errorf("beat's last tick shown %q; want –", got)
	}
	// The page refreshes itself and draws the rates once it has samples.
	waitFor(t, "a live refresh and three charts", func() bool {
		var ok bool
		b.eval(`document.getElementById("live-status").textContent.includes("updated") && document.querySelectorAll("#rates svg polyline").length === 3`, &ok)
		return ok
	})

	// Dead letters: listed, and a read-only page changes nothing, even
	// asked from the page itself with its token.
	b.open(base + "/dead?s=" + name)
	var refs []string
	b.eval(`[...document.querySelectorAll("#letters tbody tr")].map(tr => tr.dataset.ref)`, &refs)
	if len(refs) != 20 || b.text(`[data-k="total"]`) != "20" {
		t.Fatalf("the dead letters page lists %d of %q; want 20", len(refs), b.text(`[data-k="total"]`))
	}
	var boxes int
	b.eval(`document.querySelectorAll('input[name="ref"]').length`, &boxes)
	if boxes != 0 {
		t.Errorf("a read-only page offers %d checkboxes", boxes)
	}
	var status int
	b.eval(fmt.Sprintf(`fetch("/dead", {method: "POST", body: new URLSearchParams({s: %q, csrf: document.querySelector('input[name="csrf"]').value, do: "kick", ref: %q})}).then(r => r.status)`, name, refs[0]), &status)
	if status != 403 {
		t.Errorf("a kick on a read-only page answered %d; want 403", status)
	}
	if n := deadTotal(t, set); n != 20 {
		t.Fatalf("a read-only page changed the dead letters: %d left", n)
	}

	// With changes allowed: a request without the token changes nothing;
	// a kick through the page's form goes back to a consumer.
	base, _, log := webServe(t, rdb, set, webOpts{allowChanges: true})
	b.open(base + "/dead?s=" + name)
	b.eval(fmt.Sprintf(`fetch("/dead", {method: "POST", body: new URLSearchParams({s: %q, do: "kick", ref: %q})}).then(r => r.status)`, name, refs[0]), &status)
	if status != 403 || deadTotal(t, set) != 20 {
		t.Fatalf("a kick without the CSRF token: %d, %d dead left; want 403, 20", status, deadTotal(t, set))
	}
	target, err := parseRef(refs[0], set.Shards(), false)
	if err != nil {
		t.Fatal(err)
	}
	letters, err := set.DeadLetters(ctx, target.Shard, 0)
	if err != nil {
		t.Fatal(err)
	}
	var member string
	for _, l := range letters {
		if l.ID == target.ID {
			member = l.Event.Member
		}
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- set.Consume(cctx, "billing", "web-test", func(_ context.Context, e expset.Expiry) error {
			mu.Lock()
			handled[e.Member] = true
			mu.Unlock()
			return nil
		}, expset.WithPollInterval(10*time.Millisecond))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	b.eval(fmt.Sprintf(`document.querySelector('input[name="ref"][value=%q]').click(); document.getElementById("kick-selected").click(); true`, refs[0]), nil)
	b.waitLoaded(func(href string) bool { return strings.Contains(href, "done=") })
	if got := b.text(".flash"); got != "kicked 1 dead letter(s)" {
		t.Errorf("after the kick the page says %q", got)
	}
	waitFor(t, "the kicked "+member+" handled by a consumer", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled[member]
	})
	if n := deadTotal(t, set); n != 19 {
		t.Errorf("%d dead letters after kicking one of 20", n)
	}
	// The consumer sweeps: the set's page drops its warning.
	b.open(base + "/set?s=" + name)
	waitFor(t, "the warning gone with a consumer sweeping", func() bool { return b.text(`#sweeping`) == "" })
	if !strings.Contains(log.String(), "kicked 1 dead letter(s) of set "+name) {
		t.Errorf("the kick is not logged: %q", log.String())
	}

	// One letter's page shows its JSON payload pretty-printed.
	b.open(base + "/letter?s=" + name + "&ref=" + url.QueryEscape(refs[1]))
	var kind, text string
	b.eval(`document.querySelector("pre.payload").dataset.kind`, &kind)
	b.eval(`document.querySelector("pre.payload").textContent`, &text)
	var v map[string]any
	if kind != "JSON" || json.Unmarshal([]byte(text), &v) != nil || !strings.Contains(text, "\n  \"cents\": 1250") {
		t.Errorf("payload shown as %s:\n%s", kind, text)
	}

	// A job's dead letter shows the job's ID, found by the job filter.
	buryJob(t, rdb, set, "job-7")
	b.open(base + "/dead?s=" + name)
	b.eval(`document.querySelector('input[name="job"]').value = "job-7"; document.querySelector("form.filters button").click(); true`, nil)
	b.waitLoaded(func(href string) bool { return strings.Contains(href, "job=job-7") })
	b.eval(`[...document.querySelectorAll("#letters tbody tr")].map(tr => tr.dataset.ref)`, &refs)
	if len(refs) != 1 || !strings.Contains(b.text("#letters tbody"), "job job-7") {
		t.Errorf("the job filter shows %v: %q; want job-7's one letter", refs, b.text("#letters tbody"))
	}
	var html string
	b.eval(`document.documentElement.outerHTML`, &html)
	noJobOwner(t, "the dead letters of job-7", html)
}

// buryJob puts job id due at once and dead-letters it in the group
// "reminders", whose consumer buries it. The group is made before the put:
// a job due at once is on the stream at once, and another group's consumer
// may handle it, and delete it as no group's, before a Consume made the
// group.
func buryJob(t *testing.T, rdb redis.UniversalClient, set *expset.Set, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	declare(t, rdb, set, "reminders")
	if _, _, err := set.Put(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- set.Consume(ctx, "reminders", "r1", func(_ context.Context, e expset.Expiry) error {
			return expset.Bury(errors.New("no such customer"))
		}, expset.WithLeaseTTL(600*time.Millisecond))
	}()
	waitFor(t, id+" dead-lettered", func() bool {
		ds, err := set.JobDeadLetters(ctx, id)
		return err == nil && len(ds) == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// deadTotal counts the dead letters of every shard.
func deadTotal(t *testing.T, set *expset.Set) int64 {
	t.Helper()
	st, err := set.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range st {
		n += s.Dead
	}
	return n
}
