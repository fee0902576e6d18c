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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/expsetprom"
	"github.com/expset/expset/internal/redistest"
	"github.com/expset/expset/internal/store"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// jobOwnerShown matches the owner jobs and schedules are kept under, in
// any of the forms an output could carry it: raw, Go- or JSON-quoted,
// URL-escaped, as an HTML character reference, or with its NUL replaced.
var jobOwnerShown = regexp.MustCompile(`(\x00|\\x00|\\u0000|%00|&#0;|&#x0;|\x{FFFD}|\\ufffd)job`)

// noJobOwner fails t when out, an output of what, shows the owner jobs are
// kept under.
func noJobOwner(t *testing.T, what, out string) {
	t.Helper()
	if loc := jobOwnerShown.FindStringIndex(out); loc != nil {
		t.Errorf("%s shows the internal owner of jobs at %q:\n%s", what, out[max(loc[0]-40, 0):min(loc[1]+40, len(out))], out)
	}
}

// urlOf returns the --redis value that reaches rdb: a server's URL, or
// a cluster's nodes comma-separated.
func urlOf(t *testing.T, rdb redis.UniversalClient) string {
	t.Helper()
	switch c := rdb.(type) {
	case *redis.Client:
		return "redis://" + c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	t.Fatalf("no URL for a %T", rdb)
	return ""
}

// hookLog records, printed with %#v, everything a set's hooks receive,
// beside expsetprom's collector.
type hookLog struct {
	mu  sync.Mutex
	out strings.Builder
}

func (l *hookLog) add(v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range v {
		fmt.Fprintf(&l.out, "%#v\n", x)
	}
}

func (l *hookLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.out.String()
}

// wrap returns h with every hook also recorded in l.
func (l *hookLog) wrap(h expset.Hooks) expset.Hooks {
	return expset.Hooks{
		OnCall: func(ctx context.Context, ci expset.CallInfo) {
			l.add(ci)
			if h.OnCall != nil {
				h.OnCall(ctx, ci)
			}
		},
		OnAcquire: func(ctx context.Context, ci expset.CallInfo, d expset.Decision) {
			l.add(ci, d)
			if h.OnAcquire != nil {
				h.OnAcquire(ctx, ci, d)
			}
		},
		OnSweep: func(ctx context.Context, ci expset.CallInfo, st expset.SweepStats) {
			l.add(ci, st)
			if h.OnSweep != nil {
				h.OnSweep(ctx, ci, st)
			}
		},
		OnEvent: func(ctx context.Context, ci expset.CallInfo, ei expset.EventInfo) {
			l.add(ci, ei)
			if h.OnEvent != nil {
				h.OnEvent(ctx, ci, ei)
			}
		},
		OnError: func(ctx context.Context, ci expset.CallInfo, retry time.Duration) {
			l.add(ci)
			if h.OnError != nil {
				h.OnError(ctx, ci, retry)
			}
		},
		OnWait: func(ctx context.Context, ci expset.CallInfo) {
			l.add(ci)
			if h.OnWait != nil {
				h.OnWait(ctx, ci)
			}
		},
	}
}

// runUntil runs one command line in-process until its output matches
// want, then interrupts it, as an operator would, and returns the output.
func runUntil(t *testing.T, want *regexp.Regexp, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &out, &errb) }()
	waitFor(t, fmt.Sprintf("%q in the output of %v", want, args), func() bool {
		select {
		case code := <-done:
			t.Fatalf("%v ended early, exit %d: %s%s", args, code, out.String(), errb.String())
		default:
		}
		return want.MatchString(out.String())
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("%v: exit %d after the interrupt: %s", args, code, errb.String())
	}
	return out.String() + errb.String()
}

// TestNoCommandOrPageShowsJobOwners: on every backend, with a tenant's
// members, a schedule, and jobs waiting, running (a handler call under
// way), done and dead in a group, no output of any command of the CLI
// that reads a set (text and JSON), no page or form answer of expset web,
// no metric of expsetprom's two collectors and nothing a hook receives
// shows the owners jobs and schedules are kept under, raw or escaped; the
// jobs' dead letters and their running call show the jobs' IDs instead.
func TestNoCommandOrPageShowsJobOwners(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		name := "names-" + uuid.NewString()[:8]
		set, err := expset.Open(ctx, rdb, name, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithPayloadStorage())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { expset.Drop(context.Background(), rdb, name) })
		u := urlOf(t, rdb)

		if _, err := set.PutSchedule(ctx, "nightly", "@daily"); err != nil {
			t.Fatal(err)
		}
		if _, err := set.Add(ctx, "acme", "task-1", time.Hour, expset.WithPayload([]byte(`{"task":1}`))); err != nil {
			t.Fatal(err)
		}
		for id, delay := range map[string]time.Duration{"later": time.Hour, "ok-1": 0, "slow": 0, "bad-1": 0, "bad-2": 0} {
			if _, _, err := set.Put(ctx, id, delay, expset.WithPayload([]byte(`{"job":"`+id+`"}`))); err != nil {
				t.Fatal(err)
			}
		}

		// A consumer (sweeping in-process) that buries the bad jobs and
		// holds slow's call until the end, counted by expsetprom and
		// recorded.
		collector, hooks := expsetprom.NewCollector(), &hookLog{}
		counted, err := expset.Open(ctx, rdb, name, expset.WithRecordedConfiguration(), expset.WithHooks(hooks.wrap(collector.Hooks())))
		if err != nil {
			t.Fatal(err)
		}
		release, slowBegun := make(chan struct{}), make(chan struct{})
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- counted.Consume(cctx, "billing", "w1", func(ctx context.Context, e expset.Expiry) error {
				switch {
				case strings.HasPrefix(e.Member, "bad-"):
					return expset.Bury(errors.New("no such customer"))
				case e.Member == "slow":
					close(slowBegun)
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
				return nil
			}, expset.WithConcurrency(4))
		}()
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				close(release)
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}
		}
		defer stop()
		<-slowBegun
		waitFor(t, "the two bad jobs dead-lettered", func() bool {
			ds, err := set.DeadLetters(ctx, allShards, 0)
			return err == nil && len(ds) == 2
		})
		for id, want := range map[string]string{"later": "waiting", "slow": "running", "bad-1": "dead"} {
			if j, err := set.Job(ctx, id); err != nil || j.State != want {
				t.Fatalf("job %s: %+v, %v; want %s", id, j, err, want)
			}
		}

		// Every command that reads the set, in text and in JSON.
		cli := func(args ...string) string {
			t.Helper()
			var out, errb strings.Builder
			if code := run(ctx, append(args, "--redis", u), &out, &errb); code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errb.String())
			}
			noJobOwner(t, strings.Join(args, " "), out.String()+errb.String())
			return out.String()
		}
		for _, json := range [][]string{nil, {"--json"}} {
			for _, args := range [][]string{
				{"stats", name}, {"groups", name}, {"groups", "running", name, "billing"}, {"inspect", name, "acme"},
				{"schedules", name}, {"events", "dead", name}, {"events", "dead", "--job", "bad-1", name},
				{"job", name, "later"}, {"job", name, "slow"}, {"job", name, "bad-1"}, {"job", name, "ok-1"}, {"job", name, "never"},
				{"sweep", "--once", name},
			} {
				cli(append(args, json...)...)
			}
			tail := append([]string{"events", "tail", "--backlog", name, "--redis", u}, json...)
			noJobOwner(t, strings.Join(tail, " "), runUntil(t, regexp.MustCompile(`slow`), tail...))
		}
		if out := cli("events", "dead", "--job", "bad-1", name); !strings.Contains(out, "(job)") || !strings.Contains(out, "bad-1") || strings.Contains(out, "bad-2") {
			t.Errorf("events dead --job bad-1 lists:\n%s", out)
		}
		if out := cli("job", name, "slow"); !strings.Contains(out, "running") {
			t.Errorf("job of a job under way:\n%s", out)
		}
		if out := cli("job", name, "bad-1"); !strings.Contains(out, "events dead --job bad-1 "+name) {
			t.Errorf("job of a dead job does not say how to list its dead letters:\n%s", out)
		}
		if code, _, errs := runCLI(t, "events", "dead", "--job", "bad-1", "--shard", "0", "--redis", u, name); code != 2 {
			t.Errorf("events dead --job with --shard: exit %d, want 2: %s", code, errs)
		}
		noJobOwner(t, "stats --watch", runUntil(t, regexp.MustCompile(`total`), "stats", "--watch=100ms", "--redis", u, name))

		// stats --serve, and expsetprom's collectors served together.
		served := runUntilMetrics(t, u, name)
		noJobOwner(t, "stats --serve /metrics", served)
		reg := prometheus.NewRegistry()
		reg.MustRegister(expsetprom.NewStatsCollector(set), collector)
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		t.Cleanup(srv.Close)
		metrics := httpGet(t, srv.URL+"/metrics")
		if !strings.Contains(metrics, "expset_shard_jobs_due") || !strings.Contains(metrics, "expset_event_attempts_total") {
			t.Fatalf("the metrics lack the gauges of both collectors:\n%s", metrics)
		}
		noJobOwner(t, "the collectors' metrics", metrics)

		// Every page of expset web, and the answer to its forms.
		f := newWebFix(t, rdb, set, webOpts{allowChanges: true})
		q := func(kv ...string) string {
			v := url.Values{"s": {name}}
			for i := 0; i+1 < len(kv); i += 2 {
				v.Set(kv[i], kv[i+1])
			}
			return "?" + v.Encode()
		}
		for _, path := range []string{"/", "/set" + q(), "/owner" + q("o", "acme"), "/dead" + q(), "/dead" + q("job", "bad-1"), "/dead" + q("group", "billing", "err", "customer")} {
			noJobOwner(t, "GET "+path, mustGet(t, f, path))
		}
		byJob := mustGet(t, f, "/dead"+q("job", "bad-1"))
		if refs := refsOn(byJob); len(refs) != 1 || !strings.Contains(byJob, `job</span> <a href="/dead?job=bad-1`) {
			t.Errorf("the dead letters of job bad-1: refs %v in\n%s", refs, byJob)
		}
		if code, body := f.get("/owner" + q("o", store.JobOwnerPrefix+"0")); code != http.StatusBadRequest {
			t.Errorf("the page of a job owner: %d, want 400: %s", code, body)
		}
		refs := refsOn(mustGet(t, f, "/dead"+q()))
		if len(refs) != 2 {
			t.Fatalf("the dead letters page lists %v; want the two bad jobs' letters", refs)
		}
		for _, ref := range refs {
			body := mustGet(t, f, "/letter"+q("ref", ref))
			noJobOwner(t, "the letter "+ref, body)
			if !strings.Contains(body, "bad-") {
				t.Errorf("the letter %s does not show its job's ID:\n%s", ref, body)
			}
		}
		code, body := f.post(f.form("kick-matching", "confirm", "yes", "job", "bad-1"))
		if code != http.StatusSeeOther {
			t.Fatalf("kick-matching job=bad-1: %d %s", code, body)
		}
		noJobOwner(t, "kick-matching job=bad-1", body)
		noJobOwner(t, "the page's log", f.log.String())
		waitFor(t, "bad-1 buried again", func() bool {
			ds, err := set.JobDeadLetters(ctx, "bad-1")
			return err == nil && len(ds) == 1
		})

		// The commands that change dead letters and groups, last.
		cli("events", "kick", "--job", "bad-1", name)
		cli("events", "drop", "--json", "--job", "bad-2", name)
		stop()
		cli("groups", "remove", "--json", name, "billing")
		noJobOwner(t, "the hooks", hooks.String())
		if !strings.Contains(hooks.String(), "DeadLettered:true") {
			t.Errorf("the hooks saw no burial:\n%s", hooks.String())
		}
	})
}

// runUntilMetrics runs stats --serve on a free port, reads its /metrics
// once, then interrupts it.
func runUntilMetrics(t *testing.T, u, name string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"stats", "--serve", "127.0.0.1:0", "--redis", u, name}, &out, &errb) }()
	addr := regexp.MustCompile(`on (http://\S+/metrics)`)
	waitFor(t, "stats --serve serving", func() bool { return addr.MatchString(out.String()) })
	metrics := httpGet(t, addr.FindStringSubmatch(out.String())[1])
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("stats --serve: exit %d: %s", code, errb.String())
	}
	return metrics + out.String() + errb.String()
}

// httpGet returns the body of a 200 answer to a GET of u.
func httpGet(t *testing.T, u string) string {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v\n%s", u, res.StatusCode, err, b)
	}
	return string(b)
}

// TestKickByJob: events kick --job puts back a job's dead letters and no
// other's.
func TestKickByJob(t *testing.T) {
	t.Parallel()
	url_, _, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents())
	ctx := context.Background()
	for _, id := range []string{"bad-1", "bad-2"} {
		if _, _, err := set.Put(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
	}
	bury(t, set, 2)
	code, out, errs := runBin(t, "events", "kick", "--job", "bad-1", "--redis", url_, set.Name())
	if code != 0 || !strings.Contains(out, "kicked 1 dead letter of set") {
		t.Fatalf("kick --job: exit %d: %s%s", code, out, errs)
	}
	ds, err := set.DeadLetters(ctx, allShards, 0)
	if err != nil || len(ds) != 1 || ds[0].Event.Member != "bad-2" {
		t.Fatalf("after kick --job bad-1: %+v, %v; want bad-2's letter alone", ds, err)
	}
	if code, _, errs := runBin(t, "events", "kick", "--job", "bad-2", "--all", "--redis", url_, set.Name()); code != 2 {
		t.Errorf("kick --job with --all: exit %d, want 2: %s", code, errs)
	}
}
