package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/expsetprom"
	"github.com/expset/expset/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// TestJobOwnerNeverShownByTheCLI: with jobs put, some dead-lettered, a
// schedule beside them, and the work of a consumer counted by expsetprom,
// no output of the CLI, page of expset web or metric shows the owners jobs
// are kept under; jobs' dead letters show their IDs, and are filtered by
// job ID by the CLI and the page.
func TestJobOwnerNeverShownByTheCLI(t *testing.T) {
	t.Parallel()
	url_, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents(), expset.WithPayloadStorage())
	ctx := context.Background()
	if _, err := set.PutSchedule(ctx, "nightly", "@daily"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ok-1", "bad-1", "bad-2"} {
		if _, _, err := set.Put(ctx, id, 0, expset.WithPayload([]byte(`{"job":"`+id+`"}`))); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := set.Put(ctx, "later", time.Hour); err != nil {
		t.Fatal(err)
	}
	hooks := expsetprom.NewCollector()
	counted, err := expset.Open(ctx, rdb, set.Name(), expset.WithRecordedConfiguration(), expset.WithHooks(hooks.Hooks()))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- counted.Consume(cctx, "billing", "w1", func(_ context.Context, e expset.Expiry) error {
			if strings.HasPrefix(e.Member, "bad-") {
				return expset.Bury(errors.New("no such customer"))
			}
			return nil
		}, expset.WithLeaseTTL(600*time.Millisecond))
	}()
	waitFor(t, "the two bad jobs dead-lettered", func() bool {
		ds, err := set.DeadLetters(ctx, allShards, 0)
		return err == nil && len(ds) == 2
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The CLI.
	for _, args := range [][]string{
		{"stats", set.Name()}, {"stats", "--json", set.Name()},
		{"events", "dead", set.Name()}, {"events", "dead", "--json", set.Name()},
		{"events", "dead", "--job", "bad-1", set.Name()}, {"events", "dead", "--json", "--job", "bad-1", set.Name()},
		{"job", set.Name(), "bad-1"}, {"job", "--json", set.Name(), "later"},
		{"groups", set.Name()}, {"schedules", set.Name()},
	} {
		code, out, errs := runBin(t, append(args, "--redis", url_)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		noJobOwner(t, strings.Join(args, " "), out+errs)
	}
	_, out, _ := runBin(t, "events", "dead", "--job", "bad-1", "--redis", url_, set.Name())
	if !strings.Contains(out, "(job)") || !strings.Contains(out, "bad-1") || strings.Contains(out, "bad-2") {
		t.Errorf("events dead --job bad-1 lists:\n%s", out)
	}
	_, out, _ = runBin(t, "job", "--redis", url_, set.Name(), "bad-1")
	if !strings.Contains(out, "events dead --job bad-1 "+set.Name()) {
		t.Errorf("job of a dead job does not say how to list its dead letters:\n%s", out)
	}
	if code, _, errs := runBin(t, "events", "dead", "--job", "bad-1", "--shard", "0", "--redis", url_, set.Name()); code != 2 {
		t.Errorf("events dead --job with --shard: exit %d, want 2: %s", code, errs)
	}

	// The page, its dead letters filtered by job.
	f := newWebFix(t, rdb, set, webOpts{})
	for _, path := range []string{"/", "/set?s=" + set.Name(), "/dead?s=" + set.Name(), "/dead?s=" + set.Name() + "&job=bad-2"} {
		noJobOwner(t, "GET "+path, mustGet(t, f, path))
	}
	body := mustGet(t, f, "/dead?s="+set.Name()+"&job=bad-2")
	refs := refsOn(body)
	if len(refs) != 1 || !strings.Contains(body, `job</span> <a href="/dead?job=bad-2`) {
		t.Fatalf("the dead letters of job bad-2: refs %v in\n%s", refs, body)
	}
	noJobOwner(t, "a job's dead letter", mustGet(t, f, "/letter?s="+set.Name()+"&ref="+url.QueryEscape(refs[0])))
	if code, body := f.get("/owner?s=" + set.Name() + "&o=" + url.QueryEscape(store.JobOwnerPrefix+"0")); code != http.StatusBadRequest {
		t.Errorf("the page of a job owner: %d, want 400: %s", code, body)
	}

	// The metrics, from outside and from inside.
	reg := prometheus.NewRegistry()
	reg.MustRegister(expsetprom.NewStatsCollector(set), hooks)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(metrics), "expset_shard_jobs_due") || !strings.Contains(string(metrics), "expset_event_attempts_total") {
		t.Fatalf("the metrics lack the gauges of both collectors:\n%s", metrics)
	}
	noJobOwner(t, "/metrics", string(metrics))
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
