package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestStalledJobsShown: on every backend, with jobs an hour overdue and no
// sweeper running, expset stats (text and JSON), the set's page and the
// list of sets say how many are due, how late the oldest is and what to
// start; once a Sweeper runs, none of them warns.
func TestStalledJobsShown(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		set := webTestSet(t, rdb, 4)
		u := urlOf(t, rdb)
		past := time.Now().Add(-time.Hour)
		old, err := expset.Open(ctx, rdb, set.Name(), expset.WithRecordedConfiguration(), expset.WithClock(func() time.Time { return past }))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"j1", "j2", "j3"} {
			if _, _, err := old.Put(ctx, id, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		report := func() (statsReport, string) {
			t.Helper()
			code, out, errs := runCLI(t, "stats", "--json", "--redis", u, set.Name())
			var rep statsReport
			if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
				t.Fatalf("stats --json: exit %d: %s%s", code, out, errs)
			}
			code, out, errs = runCLI(t, "stats", "--redis", u, set.Name())
			if code != 0 {
				t.Fatalf("stats: exit %d: %s", code, errs)
			}
			return rep, out
		}
		f := newWebFix(t, rdb, set, webOpts{})
		const warning = "no sweeper running: 3 due (members and jobs) on "

		rep, out := report()
		if tot := rep.Total; tot.Stalled == 0 || tot.StalledDue != 3 || tot.StalledLagMS < (59*time.Minute).Milliseconds() || tot.JobsDue != 3 {
			t.Errorf("stats --json with 3 jobs an hour overdue and no sweeper: %+v", tot)
		}
		if !strings.Contains(out, "! "+warning) || !strings.Contains(out, "overdue; nothing of them is delivered until a Sweeper.Run (expset sweep), or a Consume or Reserve without WithoutSweeper, starts") {
			t.Errorf("stats with 3 jobs overdue and no sweeper does not say so:\n%s", out)
		}
		if body := mustGet(t, f, "/set?s="+set.Name()); !strings.Contains(sweeping(body), warning) {
			t.Errorf("the set's page warns %q; want %q", sweeping(body), warning)
		}
		if body := mustGet(t, f, "/"); !strings.Contains(body, "with work due and no sweeper running") {
			t.Errorf("the list of sets does not warn:\n%s", body)
		}

		w, err := expset.NewSweeper(set)
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(sctx) }()
		defer func() {
			stop()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}()
		waitFor(t, "stats without a stalled shard", func() bool {
			rep, _ := report()
			return rep.Total.Stalled == 0
		})
		if rep, out := report(); rep.Total.StalledDue != 0 || rep.Total.StalledLagMS != 0 || strings.Contains(out, "no sweeper") {
			t.Errorf("stats with a Sweeper running: %+v\n%s", rep.Total, out)
		}
		if body := mustGet(t, f, "/set?s="+set.Name()); sweeping(body) != "" {
			t.Errorf("the set's page warns %q with a Sweeper running", sweeping(body))
		}
		if body := mustGet(t, f, "/"); strings.Contains(body, "no sweeper") {
			t.Errorf("the list of sets warns with a Sweeper running:\n%s", body)
		}
	})
}

// sweeping returns what the warning of a set's page (#sweeping) holds.
func sweeping(body string) string {
	_, rest, _ := strings.Cut(body, `<div id="sweeping" data-live>`)
	in, _, _ := strings.Cut(rest, "</div>")
	return in
}
