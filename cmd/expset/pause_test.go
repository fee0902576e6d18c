package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestGroupsPauseResume: on every backend, groups pause and resume say
// what they changed (a second pause or resume changes nothing and says
// so), groups shows PAUSED ("1 owner" for an owner paused, "yes" for the
// group, both), and its JSON paused and paused_owners; resuming the group
// leaves its owner paused. A group no consumer has made yet can be paused,
// and is listed paused on 0 shards; declared later, it is listed paused. Bad input to pause, resume and
// paused is a usage error (exit 2), an unknown set exit 3.
func TestGroupsPauseResume(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		set := webTestSet(t, rdb, 4)
		name, u := set.Name(), urlOf(t, rdb)
		declare(t, rdb, set, "billing")
		cli := func(want string, args ...string) {
			t.Helper()
			code, out, errs := runCLI(t, append(args, "--redis", u)...)
			if code != 0 || strings.TrimSpace(out) != want {
				t.Errorf("%v: exit %d, %q%s; want %q", args, code, out, errs, want)
			}
		}
		// paused reads groups: billing's PAUSED in text, and in JSON.
		paused := func(want string, wantGroup bool, wantOwners int64) {
			t.Helper()
			code, out, errs := runCLI(t, "groups", "--redis", u, name)
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			// Right-aligned columns: PAUSED is what follows HELD BACK's end.
			end := strings.Index(lines[0], "HELD BACK") + len("HELD BACK")
			if code != 0 || len(lines) != 2 || strings.TrimSpace(lines[0][end:]) != "PAUSED" || len(lines[1]) < end ||
				strings.TrimSpace(lines[1][end:]) != want {
				t.Errorf("groups: exit %d:\n%s%s\nwant billing's PAUSED %q", code, out, errs, want)
			}
			code, out, errs = runCLI(t, "groups", "--json", "--redis", u, name)
			var rows []groupRowJSON
			if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Paused != wantGroup || rows[0].PausedOwners != wantOwners {
				t.Errorf("groups --json: exit %d, %s%s; want paused %v, paused_owners %d", code, out, errs, wantGroup, wantOwners)
			}
		}
		paused("", false, 0)
		shard := set.ShardOf("acme")
		cli(fmt.Sprintf(`paused owner acme in group "billing" on shard %d`, shard), "groups", "pause", name, "billing", "acme")
		cli(`owner acme in group "billing" was paused already`, "groups", "pause", name, "billing", "acme")
		paused("1 owner", false, 1)
		cli(`paused group "billing" on 4 shards`, "groups", "pause", name, "billing")
		cli(`group "billing" was paused already`, "groups", "pause", name, "billing")
		paused("yes, 1 owner", true, 1)
		cli(`resumed group "billing" on 4 shards`, "groups", "resume", name, "billing")
		cli(`group "billing" was not paused`, "groups", "resume", name, "billing")
		paused("1 owner", false, 1)
		cli(fmt.Sprintf(`resumed owner acme in group "billing" on shard %d`, shard), "groups", "resume", name, "billing", "acme")
		cli(`owner acme in group "billing" was not paused`, "groups", "resume", name, "billing", "acme")
		paused("", false, 0)

		// --json: the state asked for, and whether it changed.
		for _, tc := range []struct {
			args []string
			want pauseJSON
		}{
			{[]string{"pause", name, "billing", "user 7"}, pauseJSON{Group: "billing", Owner: "user 7", Paused: true, Changed: true, Shards: 1}},
			{[]string{"resume", name, "billing", "user 7"}, pauseJSON{Group: "billing", Owner: "user 7", Changed: true, Shards: 1}},
			{[]string{"resume", name, "billing", "user 7"}, pauseJSON{Group: "billing", Owner: "user 7", Shards: 1}},
			{[]string{"pause", name, "billing"}, pauseJSON{Group: "billing", Paused: true, Changed: true, Shards: 4}},
			{[]string{"resume", name, "billing"}, pauseJSON{Group: "billing", Changed: true, Shards: 4}},
		} {
			code, out, errs := runCLI(t, append([]string{"groups", "--redis", u, "--json"}, tc.args...)...)
			var got pauseJSON
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got != tc.want {
				t.Errorf("groups %v --json: exit %d, %s%s; want %+v", tc.args, code, out, errs, tc.want)
			}
		}

		// A group no consumer has made: paused ahead of its consumers.
		cli(`paused group "later" on 4 shards`, "groups", "pause", name, "later")
		code, out, errs := runCLI(t, "groups", "--json", "--redis", u, name)
		var rows []groupRowJSON
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 ||
			rows[1] != (groupRowJSON{Group: "later", Paused: true}) {
			t.Errorf("groups --json with later paused, not made: exit %d, %s%s; want later listed paused on 0 shards", code, out, errs)
		}
		declare(t, rdb, set, "later")
		gs, err := set.Groups(ctx)
		if err != nil || len(gs) != 2 || gs[1].Name != "later" || !gs[1].Paused {
			t.Errorf("groups after declaring later: %+v, %v; want later paused", gs, err)
		}

		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"groups", "pause", name}, 2, "want NAME GROUP [OWNER], got 1 arguments"},
			{[]string{"groups", "resume", name, "billing", "a", "b"}, 2, "want NAME GROUP [OWNER], got 4 arguments"},
			{[]string{"groups", "pause", name, "billing", ""}, 2, "leave it out to pause the whole group"},
			{[]string{"groups", "resume", name, ""}, 2, "usage"},
			{[]string{"groups", "pause", name, strings.Repeat("g", 257)}, 2, "usage"},
			{[]string{"groups", "pause", name, "billing", strings.Repeat("o", 1025)}, 2, "usage"},
			{[]string{"groups", "pause", "no-such-set", "billing"}, 3, "no set"},
			{[]string{"groups", "paused", name}, 2, "want NAME GROUP, got 1 arguments"},
			{[]string{"groups", "paused", name, ""}, 2, "usage"},
			{[]string{"groups", "paused", name, strings.Repeat("g", 257)}, 2, "usage"},
			{[]string{"groups", "paused", "no-such-set", "billing"}, 3, "no set"},
		} {
			code, _, errs := runCLI(t, append(tc.args, "--redis", u)...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Errorf("%q: exit %d, %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
			}
		}
		if gs, err := set.Groups(ctx); err != nil || gs[0].Paused || gs[0].PausedOwners != 0 {
			t.Errorf("after the refusals: %+v, %v; want billing not paused", gs, err)
		}
	})
}

// declare creates consumer group group of set on every shard, as an Open
// WithConsumerGroups does.
func declare(t *testing.T, rdb redis.UniversalClient, set *expset.Set, group string) {
	t.Helper()
	if _, err := expset.Open(context.Background(), rdb, set.Name(), expset.WithRecordedConfiguration(), expset.WithConsumerGroups(group)); err != nil {
		t.Fatal(err)
	}
}

// actOnGroups posts form to /groups as the page does (same origin) and
// returns what the page it goes back to says (done=), failing the test
// unless the answer is a 303 to the set's page.
func (f *webFix) actOnGroups(form url.Values) string {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/groups", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.srv.URL)
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	res.Body.Close()
	back, _ := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != http.StatusSeeOther || back.Path != "/set" {
		f.t.Fatalf("POST /groups %v: %d to %s; want 303 to /set", form, res.StatusCode, back)
	}
	return back.Query().Get("done")
}

// TestWebPauseGroups: on every backend, a read-only page shows no pause
// button and refuses a pause; with --allow-changes a pause or resume needs
// the page's origin and CSRF token, as every change does, and the page's
// form pauses and resumes the group, says what it did and logs it; a group
// paused before it is made has its row, with a resume button.
func TestWebPauseGroups(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		set := webTestSet(t, rdb, 2)
		declare(t, rdb, set, "billing")
		paused := func() bool {
			t.Helper()
			gs, err := set.Groups(ctx)
			if err != nil || len(gs) != 1 {
				t.Fatalf("groups: %+v, %v", gs, err)
			}
			return gs[0].Paused
		}

		ro := newWebFix(t, rdb, set, webOpts{})
		if body := mustGet(t, ro, "/set?s="+set.Name()); strings.Contains(body, `action="/groups"`) {
			t.Errorf("a read-only page offers to pause:\n%s", body)
		}
		if code, msg := ro.postTo("/groups", ro.form("pause", "group", "billing")); code != http.StatusForbidden || !strings.Contains(msg, "--allow-changes") {
			t.Errorf("a pause on a read-only page: %d %q; want 403 naming --allow-changes", code, msg)
		}

		f := newWebFix(t, rdb, set, webOpts{allowChanges: true})
		if body := mustGet(t, f, "/set?s="+set.Name()); !strings.Contains(body, `name="do" value="pause"`) || !strings.Contains(body, f.web.csrf) {
			t.Errorf("the page offers no pause button with its token:\n%s", body)
		}
		for _, tc := range []struct {
			what string
			form url.Values
			hdr  []string
			code int
		}{
			{"no CSRF token", url.Values{"s": {set.Name()}, "do": {"pause"}, "group": {"billing"}}, nil, 403},
			{"a wrong CSRF token", f.form("pause", "group", "billing", "csrf", "x"), nil, 403},
			{"another origin", f.form("pause", "group", "billing"), []string{"Origin", "http://evil.example"}, 403},
			{"a cross-site fetch", f.form("pause", "group", "billing"), []string{"Sec-Fetch-Site", "cross-site"}, 403},
			{"neither Origin nor Referer", f.form("pause", "group", "billing"), []string{"Origin", ""}, 403},
			{"an unknown action", f.form("stop", "group", "billing"), nil, 400},
			{"no group", f.form("pause"), nil, 400},
			{"an unknown set", url.Values{"s": {"other"}, "csrf": {f.web.csrf}, "do": {"pause"}, "group": {"billing"}}, nil, 404},
		} {
			if code, _ := f.postTo("/groups", tc.form, tc.hdr...); code != tc.code {
				t.Errorf("%s: %d; want %d", tc.what, code, tc.code)
			}
			if paused() {
				t.Fatalf("%s paused the group", tc.what)
			}
		}
		if code, _ := f.get("/groups?s=" + set.Name() + "&do=pause&group=billing&csrf=" + f.web.csrf); code != http.StatusMethodNotAllowed || paused() {
			t.Errorf("a GET: %d; want 405, nothing paused", code)
		}

		act := func(do, wantDone string, want bool) {
			t.Helper()
			if done := f.actOnGroups(f.form(do, "group", "billing")); done != wantDone || paused() != want {
				t.Fatalf("%s: the page says %q, paused %v; want %q, paused %v", do, done, paused(), wantDone, want)
			}
		}
		act("pause", `paused group "billing" on 2 shards`, true)
		act("pause", `group "billing" was paused already`, true)
		if body := mustGet(t, f, "/set?s="+set.Name()); !strings.Contains(body, `data-group-paused="true"`) || !strings.Contains(body, `name="do" value="resume"`) {
			t.Errorf("the page does not show billing paused with a resume button:\n%s", body)
		}
		act("resume", `resumed group "billing" on 2 shards`, false)
		act("resume", `group "billing" was not paused`, false)
		if log := f.log.String(); !strings.Contains(log, `paused group "billing" on 2 shards of set `+set.Name()) || !strings.Contains(log, `resumed group "billing"`) {
			t.Errorf("pause and resume not logged:\n%s", log)
		}

		// A group paused before any consumer makes it has its row, to resume it.
		row := regexp.MustCompile(`<tr data-group="later" class="paused">(?s:.*?)data-group-paused="true"(?s:.*?)name="do" value="resume"`)
		if _, err := set.Pause(ctx, "later", ""); err != nil {
			t.Fatal(err)
		}
		if body := mustGet(t, f, "/set?s="+set.Name()); !row.MatchString(body) {
			t.Errorf("the page does not show later, not made, paused with a resume button:\n%s", body)
		}
	})
}

// TestWebBrowserPause: with owner a paused in group billing (through the
// library) and a Consume running, a set's page shows billing with 1 owner
// paused and a's event held back while b's was handled; the page's pause
// button pauses the whole group (the library reads it paused, the page
// shows it), its resume button resumes it, and once the library resumes a
// the live refresh shows billing not paused, nothing held back. A group
// paused before it is made shows its row, on no stream, until its resume
// button resumes it.
func TestWebBrowserPause(t *testing.T) {
	// Not parallel: chromium takes the machine for a while.
	b := startBrowser(t)
	ctx := context.Background()
	_, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithConsumerGroups("billing"))
	addExpired(t, set, rdb, "a", "b")
	sweepNow(t, set, 2)
	if _, err := set.Pause(ctx, "billing", "a"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]bool{}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- set.Consume(cctx, "billing", "w1", func(_ context.Context, e expset.Expiry) error {
			mu.Lock()
			handled[e.Owner] = true
			mu.Unlock()
			return nil
		}, expset.WithPollInterval(5*time.Millisecond))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	was := func(owner string) bool { mu.Lock(); defer mu.Unlock(); return handled[owner] }
	waitFor(t, "b handled and a held back", func() bool {
		r, err := set.Running(ctx, "billing", 1)
		return was("b") && err == nil && r.HeldBack == 1
	})

	base, _, log := webServe(t, rdb, set, webOpts{allowChanges: true})
	b.open(base + "/set?s=" + set.Name())
	row := `#groups tr[data-group="billing"] `
	if p, h, r := b.text(row+`[data-k="paused"]`), b.text(row+`[data-k="held-back"]`), b.text(row+`[data-k="running"]`); p != "1 owner paused" || h != "1" || r != "0" {
		t.Errorf("billing shows paused %q, %q held back, %q running; want 1 owner paused, 1, 0", p, h, r)
	}
	groupPaused := func() bool {
		gs, err := set.Groups(ctx)
		if err != nil || len(gs) != 1 {
			t.Fatalf("groups: %+v, %v", gs, err)
		}
		return gs[0].Paused
	}

	b.eval(`document.querySelector('#groups tr[data-group="billing"] button[value="pause"]').click(); true`, nil)
	b.waitLoaded(func(href string) bool { return strings.Contains(href, "done=paused") })
	if got := b.text(".flash"); got != `paused group "billing" on 2 shards` {
		t.Errorf("after the pause the page says %q", got)
	}
	var class string
	b.eval(`document.querySelector('#groups tr[data-group="billing"]').className`, &class)
	if p := b.text(row + `[data-k="paused"]`); p != "paused, 1 owner paused" || class != "paused" || !groupPaused() {
		t.Errorf("after the pause billing shows %q (class %q), the library reads it paused: %v", p, class, groupPaused())
	}

	b.eval(`document.querySelector('#groups tr[data-group="billing"] button[value="resume"]').click(); true`, nil)
	b.waitLoaded(func(href string) bool { return strings.Contains(href, "done=resumed") })
	if p := b.text(row + `[data-k="paused"]`); p != "1 owner paused" || groupPaused() {
		t.Errorf("after the resume billing shows %q, the library reads it paused: %v", p, groupPaused())
	}
	if !strings.Contains(log.String(), `resumed group "billing" on 2 shards of set `+set.Name()) {
		t.Errorf("the resume is not logged: %q", log.String())
	}

	if _, err := set.Resume(ctx, "billing", "a"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a handled", func() bool { return was("a") })
	waitFor(t, "the live refresh showing billing not paused, nothing held back", func() bool {
		return b.text(row+`[data-k="paused"]`) == "–" && b.text(row+`[data-k="held-back"]`) == "0"
	})

	// A group paused before any consumer makes it: its row, on no stream,
	// and its resume button.
	if _, err := set.Pause(ctx, "later", ""); err != nil {
		t.Fatal(err)
	}
	b.open(base + "/set?s=" + set.Name())
	later := `#groups tr[data-group="later"] `
	if p, g := b.text(later+`[data-k="paused"]`), b.text(later+`[data-k="group"]`); p != "paused" || g != "later no stream has it yet" {
		t.Errorf("later, paused before it is made, shows %q, paused %q; want it on no stream, paused", g, p)
	}
	if g := b.text(row + `[data-k="group"]`); g != "billing" {
		t.Errorf("billing's name cell: %q", g)
	}
	b.eval(`document.querySelector('#groups tr[data-group="later"] button[value="resume"]').click(); true`, nil)
	b.waitLoaded(func(href string) bool { return strings.Contains(href, "done=resumed") })
	var rows int
	b.eval(`document.querySelectorAll('#groups tr[data-group="later"]').length`, &rows)
	if gs, err := set.Groups(ctx); err != nil || len(gs) != 1 || rows != 0 {
		t.Errorf("after resuming later: groups %+v, %v, the page shows %d rows of it; want billing alone", gs, err, rows)
	}
}

// TestGroupsPaused: on every backend, groups paused lists the owners
// paused in a group, sorted by their bytes, one a line (quoted where they
// hold spaces or bytes that are not UTF-8) with their count, or as JSON
// (owner_base64 for bytes that are not UTF-8); a resumed owner leaves the
// list, an owner of another group is not in it, a group with none lists
// none (TestGroupsPauseResume tries its bad input).
func TestGroupsPaused(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		set := webTestSet(t, rdb, 4)
		name, u := set.Name(), urlOf(t, rdb)
		for _, o := range []string{"zeta", "\xff\xfebin", "acme", "user 7"} {
			if _, err := set.Pause(ctx, "billing", o); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := set.Pause(ctx, "other", "beta"); err != nil {
			t.Fatal(err)
		}
		text := func(group, want string) {
			t.Helper()
			code, out, errs := runCLI(t, "groups", "paused", "--redis", u, name, group)
			if code != 0 || out != want {
				t.Errorf("groups paused %s: exit %d, %q%s; want %q", group, code, out, errs, want)
			}
		}
		text("billing", "acme\n\"user 7\"\nzeta\n\"\\xff\\xfebin\"\n4 owners paused in group \"billing\"\n")
		text("none", "0 owners paused in group \"none\"\n")

		code, out, errs := runCLI(t, "groups", "paused", "--json", "--redis", u, name, "billing")
		var got pausedJSON
		want := pausedJSON{Group: "billing", Owners: []pausedOwnerRow{{Owner: "acme"}, {Owner: "user 7"}, {Owner: "zeta"},
			{Owner: "\ufffd\ufffdbin", OwnerBase64: "//5iaW4="}}}
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("groups paused --json: exit %d, %s%s; want %+v", code, out, errs, want)
		}
		if code, out, _ := runCLI(t, "groups", "paused", "--json", "--redis", u, name, "none"); code != 0 || out != "{\"group\":\"none\",\"owners\":[]}\n" {
			t.Errorf("groups paused --json of a group with none: exit %d, %q", code, out)
		}

		if code, _, errs := runCLI(t, "groups", "resume", "--redis", u, name, "billing", "acme"); code != 0 {
			t.Fatalf("resume acme: exit %d %s", code, errs)
		}
		text("billing", "\"user 7\"\nzeta\n\"\\xff\\xfebin\"\n3 owners paused in group \"billing\"\n")

	})
}

// pausedOwnersOn returns the owners a set's page lists as paused in group,
// in order, each with whether it has a resume button.
func pausedOwnersOn(body, group string) (owners []string, buttons int) {
	_, sec, _ := strings.Cut(body, `<section id="paused"`)
	sec, _, _ = strings.Cut(sec, "</section>")
	_, table, ok := strings.Cut(sec, `<table class="paused-owners" data-group="`+html.EscapeString(group)+`">`)
	if !ok {
		return nil, 0
	}
	table, _, _ = strings.Cut(table, "</table>")
	for _, m := range regexp.MustCompile(`<tr data-owner="([^"]*)">`).FindAllStringSubmatch(table, -1) {
		owners = append(owners, html.UnescapeString(m[1]))
	}
	return owners, strings.Count(table, `name="do" value="resume"`)
}

// TestWebPausedOwners: on every backend, a set's page lists the owners
// paused in each group, the first 100 by their bytes with how many more,
// without buttons when read-only; with --allow-changes each has a resume
// button whose form (the group's form, with the owner, or owner_base64
// for bytes that are not UTF-8) resumes it through the same guards as
// every change, says what it did and logs it; the form pauses an owner
// too.
func TestWebPausedOwners(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		set := webTestSet(t, rdb, 2)
		declare(t, rdb, set, "billing")
		owners := []string{"user 7", "\xff\xfebin"}
		for i := range webPausedShown + 1 {
			owners = append(owners, fmt.Sprintf("o%03d", i))
		}
		for _, o := range owners {
			if _, err := set.Pause(ctx, "billing", o); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(owners)
		page := "/set?s=" + set.Name()

		ro := newWebFix(t, rdb, set, webOpts{})
		body := mustGet(t, ro, page)
		if shown, buttons := pausedOwnersOn(body, "billing"); !slices.Equal(shown, owners[:webPausedShown]) || buttons != 0 {
			t.Errorf("read-only page: %d owners shown (%q...), %d resume buttons; want the first %d, none", len(shown), shown[:min(3, len(shown))], buttons, webPausedShown)
		}
		if !strings.Contains(body, "and 3 more") {
			t.Errorf("the page does not say 3 more owners are paused")
		}

		f := newWebFix(t, rdb, set, webOpts{allowChanges: true})
		if _, buttons := pausedOwnersOn(mustGet(t, f, page), "billing"); buttons != webPausedShown {
			t.Errorf("%d resume buttons; want %d", buttons, webPausedShown)
		}
		listed := func() []string {
			t.Helper()
			got, err := set.PausedOwners(ctx, "billing")
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		for _, tc := range []struct {
			what string
			form url.Values
			hdr  []string
			code int
		}{
			{"no CSRF token", url.Values{"s": {set.Name()}, "do": {"resume"}, "group": {"billing"}, "owner": {"o000"}}, nil, 403},
			{"another origin", f.form("resume", "group", "billing", "owner", "o000"), []string{"Origin", "http://evil.example"}, 403},
			{"bad base64", f.form("resume", "group", "billing", "owner_base64", "!!"), nil, 400},
			{"an owner kept for jobs", f.form("pause", "group", "billing", "owner", "\x00job:1"), nil, 400},
		} {
			if code, _ := f.postTo("/groups", tc.form, tc.hdr...); code != tc.code {
				t.Errorf("%s: %d; want %d", tc.what, code, tc.code)
			}
			if got := listed(); !slices.Equal(got, owners) {
				t.Fatalf("%s changed the owners paused: %d", tc.what, len(got))
			}
		}

		act := func(form url.Values, wantDone string) {
			t.Helper()
			if done := f.actOnGroups(form); done != wantDone {
				t.Fatalf("%v: the page says %q; want %q", form, done, wantDone)
			}
		}
		on := func(o string) int { return set.ShardOf(o) }
		act(f.form("resume", "group", "billing", "owner", "user 7"), fmt.Sprintf(`resumed owner "user 7" in group "billing" on shard %d`, on("user 7")))
		act(f.form("resume", "group", "billing", "owner", "user 7"), `owner "user 7" in group "billing" was not paused`)
		act(f.form("resume", "group", "billing", "owner_base64", "//5iaW4="), fmt.Sprintf(`resumed owner "\xff\xfebin" in group "billing" on shard %d`, on("\xff\xfebin")))
		act(f.form("pause", "group", "billing", "owner", "new"), fmt.Sprintf(`paused owner new in group "billing" on shard %d`, on("new")))
		want := append(slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == "user 7" || o == "\xff\xfebin" }), "new")
		slices.Sort(want)
		if got := listed(); !slices.Equal(got, want) {
			t.Errorf("after the form's resumes and pause: %q...; want %q...", got[:3], want[:3])
		}
		if shown, _ := pausedOwnersOn(mustGet(t, f, page), "billing"); !slices.Equal(shown, want[:webPausedShown]) {
			t.Errorf("the page lists %q...; want %q...", shown[:3], want[:3])
		}
		if log := f.log.String(); !strings.Contains(log, `resumed owner "user 7" in group "billing" on shard`) {
			t.Errorf("the owner's resume is not logged:\n%s", log)
		}
	})
}

// TestWebBrowserPausedOwners: with owners merchant-42 and acme paused in
// group billing (through the library), a set's page lists both among the
// owners paused; merchant-42's resume button resumes it: the page says so
// and lists acme only, as the library does; once the library resumes acme,
// the live refresh shows no owner paused.
func TestWebBrowserPausedOwners(t *testing.T) {
	// Not parallel: chromium takes the machine for a while.
	b := startBrowser(t)
	ctx := context.Background()
	_, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithConsumerGroups("billing"))
	for _, o := range []string{"merchant-42", "acme"} {
		if _, err := set.Pause(ctx, "billing", o); err != nil {
			t.Fatal(err)
		}
	}
	base, _, log := webServe(t, rdb, set, webOpts{allowChanges: true})
	b.open(base + "/set?s=" + set.Name())
	shown := func() []string {
		var got []string
		b.eval(`Array.from(document.querySelectorAll('#paused table[data-group="billing"] tr[data-owner]'), r => r.dataset.owner)`, &got)
		return got
	}
	if got := shown(); !slices.Equal(got, []string{"acme", "merchant-42"}) {
		t.Fatalf("the page lists %q paused; want acme and merchant-42", got)
	}

	b.eval(`document.querySelector('#paused tr[data-owner="merchant-42"] button[value="resume"]').click(); true`, nil)
	b.waitLoaded(func(href string) bool { return strings.Contains(href, "done=resumed") })
	want := fmt.Sprintf(`resumed owner merchant-42 in group "billing" on shard %d`, set.ShardOf("merchant-42"))
	if got := b.text(".flash"); got != want {
		t.Errorf("after the resume the page says %q; want %q", got, want)
	}
	if got := shown(); !slices.Equal(got, []string{"acme"}) {
		t.Errorf("after the resume the page lists %q; want acme", got)
	}
	if got, err := set.PausedOwners(ctx, "billing"); err != nil || !slices.Equal(got, []string{"acme"}) {
		t.Errorf("after the resume the library lists %q, %v; want acme", got, err)
	}
	if !strings.Contains(log.String(), want+" of set "+set.Name()) {
		t.Errorf("the resume is not logged: %q", log.String())
	}

	if _, err := set.Resume(ctx, "billing", "acme"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the live refresh showing no owner paused", func() bool {
		return len(shown()) == 0 && b.text("#paused p.muted") == "No owner is paused."
	})
}
