package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// webFix is the page serving one set, over httptest on loopback.
type webFix struct {
	t    *testing.T
	rdb  redis.UniversalClient
	set  *expset.Set
	web  *webServer
	srv  *httptest.Server
	log  *syncBuffer
	dead []string // the dead-letter stream of each shard
}

// newWebFix serves set (already filled) with o's options.
func newWebFix(t *testing.T, rdb redis.UniversalClient, set *expset.Set, o webOpts) *webFix {
	t.Helper()
	if o.listen == "" {
		o.listen = "127.0.0.1:0"
	}
	loopback, err := checkWebOpts(o)
	if err != nil {
		t.Fatal(err)
	}
	f := &webFix{t: t, rdb: rdb, set: set, log: &syncBuffer{}}
	c := &conn{rdb: rdb, desc: "test Redis", close: func() {}}
	f.web, err = newWebServer(context.Background(), c, []string{set.Name()}, o, loopback, f.log)
	if err != nil {
		t.Fatal(err)
	}
	f.dead = f.web.sets[0].dead
	f.srv = httptest.NewServer(f.web.handler())
	t.Cleanup(f.srv.Close)
	return f
}

// miniSet opens a set with expiry events over shards shards on a fresh
// miniredis.
func miniSet(t *testing.T, shards int) (*redis.Client, *expset.Set) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb, webTestSet(t, rdb, shards)
}

// webTestSet opens a fresh set with expiry events and payloads over shards
// shards, dropped when t ends.
func webTestSet(t *testing.T, rdb redis.UniversalClient, shards int) *expset.Set {
	t.Helper()
	name := "web-" + uuid.NewString()[:8]
	set, err := expset.Open(context.Background(), rdb, name, expset.WithShards(shards), expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { expset.Drop(context.Background(), rdb, name) })
	return set
}

// addDead writes n dead letters of group straight to shard's dead-letter
// stream, as Consume buries them.
func (f *webFix) addDead(shard, n int, group, errText, owner string) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		err := f.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: f.dead[shard], Values: []any{
			"o", owner, "m", fmt.Sprintf("order-%d-%d", shard, i), "d", strconv.FormatInt(time.Now().UnixMilli(), 10),
			"p", `{"n":` + strconv.Itoa(i) + `}`, "g", group, "a", "3", "id", "1-1", "c", "worker-1", "err", errText,
		}}).Err()
		if err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *webFix) deadCount() int64 {
	f.t.Helper()
	var n int64
	for _, k := range f.dead {
		l, err := f.rdb.XLen(context.Background(), k).Result()
		if err != nil {
			f.t.Fatal(err)
		}
		n += l
	}
	return n
}

// get fetches path and returns the status and body.
func (f *webFix) get(path string, hdr ...string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return f.do(req)
}

func (f *webFix) do(req *http.Request) (int, string) {
	f.t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// post sends form to /dead as the page would (same origin, the CSRF token)
// unless hdr overrides it: "Origin", "" drops the Origin header.
func (f *webFix) post(form url.Values, hdr ...string) (int, string) {
	f.t.Helper()
	return f.postTo("/dead", form, hdr...)
}

// postTo is post to path.
func (f *webFix) postTo(path string, form url.Values, hdr ...string) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.srv.URL)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return f.do(req)
}

// form is an action on set with the page's CSRF token (kv: more fields;
// csrf replaces the token).
func (f *webFix) form(do string, kv ...string) url.Values {
	v := url.Values{"s": {f.set.Name()}, "csrf": {f.web.csrf}, "do": {do}}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "csrf" {
			v.Set(kv[i], kv[i+1])
		} else {
			v.Add(kv[i], kv[i+1])
		}
	}
	return v
}

// refsOn returns the SHARD/ID of every dead letter a page lists.
var refRE = regexp.MustCompile(`data-ref="([0-9]+/[0-9]+-[0-9]+)"`)

func refsOn(body string) []string {
	var out []string
	for _, m := range refRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestWebListenRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o        webOpts
		loopback bool
		bad      string
	}{
		{o: webOpts{listen: "127.0.0.1:8080"}, loopback: true},
		{o: webOpts{listen: "localhost:0"}, loopback: true},
		{o: webOpts{listen: "[::1]:8080"}, loopback: true},
		{o: webOpts{listen: ":8080"}, bad: "reaches beyond this machine"},
		{o: webOpts{listen: "0.0.0.0:8080"}, bad: "--token"},
		{o: webOpts{listen: "10.1.2.3:8080"}, bad: "--basic-auth"},
		{o: webOpts{listen: "0.0.0.0:8080", token: "t"}},
		{o: webOpts{listen: "0.0.0.0:8080", basicAuth: "ops:secret"}},
		{o: webOpts{listen: "0.0.0.0:8080", basicAuth: "ops"}, bad: "USER:PASSWORD"},
		{o: webOpts{listen: "127.0.0.1:1", token: "t", basicAuth: "a:b"}, bad: "give one"},
		{o: webOpts{listen: "8080"}, bad: "host:port"},
	} {
		loopback, err := checkWebOpts(tc.o)
		if tc.bad != "" {
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%+v: %v; want a usage error saying %q", tc.o, err, tc.bad)
			}
			continue
		}
		if err != nil || loopback != tc.loopback {
			t.Errorf("%+v: loopback %v, %v; want %v, nil", tc.o, loopback, err, tc.loopback)
		}
	}
}

func TestWebReadOnlyRefusesChanges(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, testWebReadOnly)
}

func testWebReadOnly(t *testing.T, rdb redis.UniversalClient) {
	set := webTestSet(t, rdb, 2)
	f := newWebFix(t, rdb, set, webOpts{})
	f.addDead(0, 3, "billing", "boom", "user-1")
	_, body := f.get("/dead?s=" + set.Name())
	refs := refsOn(body)
	if len(refs) != 3 || strings.Contains(body, `name="csrf"`) && strings.Contains(body, "kick-selected") {
		t.Fatalf("read-only page: refs %v, or it offers to kick:\n%s", refs, body)
	}
	for _, do := range []string{"kick", "delete"} {
		code, msg := f.post(f.form(do, "ref", refs[0]))
		if code != http.StatusForbidden || !strings.Contains(msg, "--allow-changes") {
			t.Errorf("%s on a read-only page: %d %q; want 403 naming --allow-changes", do, code, msg)
		}
	}
	code, _ := f.post(f.form("delete-matching", "confirm", "yes"))
	if code != http.StatusForbidden {
		t.Errorf("delete-matching on a read-only page: %d; want 403", code)
	}
	if n := f.deadCount(); n != 3 {
		t.Fatalf("a read-only page changed the dead letters: %d left of 3", n)
	}
	if !strings.Contains(f.log.String(), "refused: read-only") {
		t.Errorf("refusals not logged: %q", f.log.String())
	}
}

func TestWebChangesNeedThePageAndItsToken(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, testWebChanges)
}

func testWebChanges(t *testing.T, rdb redis.UniversalClient) {
	set := webTestSet(t, rdb, 2)
	f := newWebFix(t, rdb, set, webOpts{allowChanges: true})
	f.addDead(1, 2, "billing", "boom", "user-1")
	_, body := f.get("/dead?s=" + set.Name())
	refs := refsOn(body)
	if len(refs) != 2 || !strings.Contains(body, f.web.csrf) {
		t.Fatalf("page lists %v and its token: %v", refs, strings.Contains(body, f.web.csrf))
	}
	for _, tc := range []struct {
		what string
		form url.Values
		hdr  []string
		code int
	}{
		{"no CSRF token", url.Values{"s": {set.Name()}, "do": {"kick"}, "ref": {refs[0]}}, nil, 403},
		{"a wrong CSRF token", f.form("kick", "ref", refs[0], "csrf", "x"), nil, 403},
		{"another origin", f.form("kick", "ref", refs[0]), []string{"Origin", "http://evil.example"}, 403},
		{"a cross-site fetch", f.form("kick", "ref", refs[0]), []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"neither Origin nor Referer", f.form("kick", "ref", refs[0]), []string{"Origin", ""}, 403},
		{"a Referer of another site", f.form("kick", "ref", refs[0]), []string{"Origin", "", "Referer", "http://evil.example/dead"}, 403},
		{"a GET", nil, nil, 405},
		{"no confirmation for all", f.form("kick-matching"), nil, 400},
		{"no selection", f.form("kick"), nil, 400},
		{"a malformed ref", f.form("kick", "ref", "0/x"), nil, 400},
		{"a shard out of range", f.form("kick", "ref", "9/1-1"), nil, 400},
		{"an unknown set", url.Values{"s": {"other"}, "csrf": {f.web.csrf}, "do": {"kick"}, "ref": {refs[0]}}, nil, 404},
		{"an unknown action", f.form("drop", "ref", refs[0]), nil, 400},
	} {
		var code int
		if tc.form == nil {
			code, _ = f.get("/dead?do=kick&ref=" + refs[0] + "&csrf=" + f.web.csrf + "&s=" + set.Name())
			if code == 200 {
				code = 405 // the GET only read the list
			}
		} else {
			code, _ = f.post(tc.form, tc.hdr...)
		}
		if code != tc.code {
			t.Errorf("%s: %d; want %d", tc.what, code, tc.code)
		}
		if n := f.deadCount(); n != 2 {
			t.Fatalf("%s changed the dead letters: %d left of 2", tc.what, n)
		}
	}
	// The page's own form works: kick one, delete the other (with a
	// Referer instead of an Origin).
	code, _ := f.post(f.form("kick", "ref", refs[0]))
	if code != http.StatusSeeOther || f.deadCount() != 1 {
		t.Fatalf("kick: %d, %d dead left; want 303, 1", code, f.deadCount())
	}
	if n, _ := rdb.XLen(context.Background(), strings.TrimSuffix(f.dead[1], "dead")+"ev").Result(); n != 1 {
		t.Errorf("the kicked letter is not on the event stream: XLEN %d", n)
	}
	code, _ = f.post(f.form("delete", "ref", refs[1]), "Origin", "", "Referer", f.srv.URL+"/dead?s=x")
	if code != http.StatusSeeOther || f.deadCount() != 0 {
		t.Fatalf("delete: %d, %d dead left; want 303, 0", code, f.deadCount())
	}
	log := f.log.String()
	if !strings.Contains(log, "kicked 1 dead letter(s) of set "+set.Name()) || !strings.Contains(log, "deleted 1 dead letter(s)") {
		t.Errorf("actions not logged:\n%s", log)
	}
}

func TestWebAuth(t *testing.T) {
	t.Parallel()
	rdb, set := miniSet(t, 1)
	for _, tc := range []struct {
		o        webOpts
		user, pw string
		bearer   string
		want     int
	}{
		{o: webOpts{token: "s3cret"}, want: 401},
		{o: webOpts{token: "s3cret"}, user: "any", pw: "s3cret", want: 200},
		{o: webOpts{token: "s3cret"}, user: "any", pw: "wrong", want: 401},
		{o: webOpts{token: "s3cret"}, bearer: "s3cret", want: 200},
		{o: webOpts{token: "s3cret"}, bearer: "s3cre", want: 401},
		{o: webOpts{basicAuth: "ops:pw"}, user: "ops", pw: "pw", want: 200},
		{o: webOpts{basicAuth: "ops:pw"}, user: "dev", pw: "pw", want: 401},
		{o: webOpts{basicAuth: "ops:pw"}, want: 401},
	} {
		f := newWebFix(t, rdb, set, tc.o)
		for _, path := range []string{"/", "/set?s=" + set.Name(), "/static/app.js"} {
			req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
			if tc.user != "" {
				req.SetBasicAuth(tc.user, tc.pw)
			}
			if tc.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tc.bearer)
			}
			if code, _ := f.do(req); code != tc.want {
				t.Errorf("%+v %s: %d; want %d", tc, path, code, tc.want)
			}
		}
	}
	// A page on loopback answers only to this machine's names (DNS rebinding).
	f := newWebFix(t, rdb, set, webOpts{})
	req, _ := http.NewRequest("GET", f.srv.URL+"/", nil)
	req.Host = "evil.example"
	if code, _ := f.do(req); code != http.StatusMisdirectedRequest {
		t.Errorf("Host evil.example: %d; want 421", code)
	}
	req.Host = "localhost:1234"
	if code, _ := f.do(req); code != http.StatusOK {
		t.Errorf("Host localhost: %d; want 200", code)
	}
}

func TestWebPagesAndPaging(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, testWebPages)
}

func testWebPages(t *testing.T, rdb redis.UniversalClient) {
	set := webTestSet(t, rdb, 3)
	ctx := context.Background()
	f := newWebFix(t, rdb, set, webOpts{allowChanges: true})
	f.addDead(0, 70, "billing", "gateway timeout", "user-1")
	f.addDead(1, 30, "email", "no address", "user-2")
	f.addDead(2, 25, "billing", "Gateway TIMEOUT again", "user-3")
	for _, m := range []string{"a", "b"} {
		if _, err := set.Add(ctx, "user 7", "order-"+m, time.Hour, expset.WithPayload([]byte("12345"))); err != nil {
			t.Fatal(err)
		}
	}
	// Every page of unfiltered letters: 50, 50, 25, in shard order, no repeat.
	seen := map[string]bool{}
	next := "/dead?s=" + set.Name()
	for pages := 0; next != ""; pages++ {
		code, body := f.get(next)
		if code != 200 || pages > 3 {
			t.Fatalf("%s: %d (page %d)", next, code, pages)
		}
		if !strings.Contains(body, "of <span data-k=\"total\">125</span>") {
			t.Errorf("%s does not count 125", next)
		}
		for _, r := range refsOn(body) {
			if seen[r] {
				t.Fatalf("%s repeats %s", next, r)
			}
			seen[r] = true
		}
		next = ""
		if m := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if len(seen) != 125 {
		t.Fatalf("the pages listed %d dead letters; want 125", len(seen))
	}
	// Filters: the error in any case, a group, an owner, a shard.
	for _, tc := range []struct {
		q    string
		want int
	}{
		{"err=timeout", 95}, {"group=email", 30}, {"owner=user-3", 25}, {"shard=1", 30},
		{"group=billing&err=again", 25}, {"err=nothing+like+it", 0},
	} {
		code, body := f.get("/dead?s=" + set.Name() + "&" + tc.q)
		want := fmt.Sprintf(`<span data-k="matches">%d</span>`, tc.want)
		if code != 200 || !strings.Contains(body, want) || len(refsOn(body)) != min(tc.want, webPageSize) {
			t.Errorf("%s: %d, %d listed, counts %v; want %d", tc.q, code, len(refsOn(body)), regexp.MustCompile(`data-k="matches">[0-9]+`).FindString(body), tc.want)
		}
	}
	// One letter, its JSON payload pretty-printed; the owner's members.
	code, body := f.get("/letter?s=" + set.Name() + "&ref=" + url.QueryEscape(refsOn(mustGet(t, f, "/dead?s="+set.Name()+"&shard=1"))[0]))
	if code != 200 || !strings.Contains(body, `data-kind="JSON"`) || !strings.Contains(body, "no address") {
		t.Errorf("/letter: %d\n%s", code, body)
	}
	code, body = f.get("/owner?s=" + set.Name() + "&o=user+7")
	if code != 200 || !strings.Contains(body, "order-a") || !strings.Contains(body, "5 B") {
		t.Errorf("/owner: %d\n%s", code, body)
	}
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/", 200}, {"/set?s=" + set.Name(), 200}, {"/set?s=nope", 404}, {"/dead?s=" + set.Name() + "&shard=3", 400},
		{"/dead?s=" + set.Name() + "&after=0/x", 400}, {"/letter?s=" + set.Name() + "&ref=0/1-999", 404},
		{"/owner?s=" + set.Name() + "&o=", 400}, {"/owner?s=" + set.Name() + "&o=" + strings.Repeat("x", 1025), 400},
		{"/owner?s=" + set.Name() + "&o=u&at=-1", 400}, {"/dead?s=" + set.Name() + "&err=" + strings.Repeat("x", 1025), 400},
		{"/nothing", 404}, {"/static/style.css", 200},
	} {
		if code, body := f.get(tc.path); code != tc.code {
			t.Errorf("%s: %d; want %d\n%s", tc.path, code, tc.code, body)
		}
	}
	// Kick every letter matching a filter: only those move.
	code, _ = f.post(f.form("kick-matching", "confirm", "yes", "err", "again"))
	if code != http.StatusSeeOther || f.deadCount() != 100 {
		t.Fatalf("kick-matching err=again: %d, %d dead left; want 303, 100", code, f.deadCount())
	}
	code, _ = f.post(f.form("delete-matching", "confirm", "yes", "group", "billing"))
	if code != http.StatusSeeOther || f.deadCount() != 30 {
		t.Fatalf("delete-matching group=billing: %d, %d dead left; want 303, 30", code, f.deadCount())
	}
}

func mustGet(t *testing.T, f *webFix, path string) string {
	t.Helper()
	code, body := f.get(path)
	if code != 200 {
		t.Fatalf("%s: %d\n%s", path, code, body)
	}
	return body
}

func TestWebCommandRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"web", "--redis", "127.0.0.1:1", "--listen", "0.0.0.0:0"}, 2, "reaches beyond this machine: give --token"},
		{[]string{"web", "--redis", "127.0.0.1:1", "--listen", "nowhere"}, 2, "want host:port"},
		{[]string{"web", "--demo", "some-set"}, 2, "--demo shows its own set"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	// A Redis without sets, and a set that is not there.
	mr := miniredis.RunT(t)
	for _, args := range [][]string{{"web", "--redis", mr.Addr(), "--listen", "127.0.0.1:0"}, {"web", "--redis", mr.Addr(), "--listen", "127.0.0.1:0", "nope"}} {
		if code, _, stderr := runCLI(t, args...); code != 3 || !strings.Contains(stderr, "no set") {
			t.Errorf("%q: exit %d, %q; want 3, no set", args, code, stderr)
		}
	}
}

// TestWebDemo runs "expset web --demo" on an embedded Redis (REDIS_URL
// names it), reads its set's page, and stops it: nothing is left running,
// no key is left behind.
func TestWebDemo(t *testing.T) {
	mr := miniredis.RunT(t)
	t.Setenv("REDIS_URL", "redis://"+mr.Addr())
	current := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"web", "--demo", "--listen", "127.0.0.1:0"}, &out, &errb) }()
	var base string
	waitFor(t, "the page's address", func() bool {
		m := regexp.MustCompile(`on (http://127\.0\.0\.1:[0-9]+)/`).FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	waitFor(t, "the demo's consumer groups on its page", func() bool {
		res, err := http.Get(base + "/set?s=" + webDemoSet)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode == 200 && strings.Contains(string(b), `data-group="billing"`) && strings.Contains(string(b), `data-group="email"`)
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("web --demo: exit %d\n%s", code, errb.String())
	}
	if keys := mr.Keys(); len(keys) != 0 {
		t.Errorf("the demo left %d keys: %q", len(keys), keys)
	}
	http.DefaultClient.CloseIdleConnections()
	goleak.VerifyNone(t, current)
}

func TestWebDiscoversSets(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		a, b := webTestSet(t, rdb, 3), webTestSet(t, rdb, 1)
		names, err := discoverSets(context.Background(), rdb)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{a.Name(), b.Name()} {
			if !slices.Contains(names, want) {
				t.Errorf("discovered %q; want %s among them", names, want)
			}
		}
	})
}
