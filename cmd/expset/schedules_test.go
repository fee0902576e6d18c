package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
)

// putSchedules gives set two schedules: "nightly" at 3:00 in Paris, whose
// next tick it returns, and "beat", every 90s, paused.
func putSchedules(t *testing.T, set *expset.Set) time.Time {
	t.Helper()
	ctx := context.Background()
	next, err := set.PutSchedule(ctx, "nightly", "CRON_TZ=Europe/Paris 0 3 * * *")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.PutSchedule(ctx, "beat", "@every 90s"); err != nil {
		t.Fatal(err)
	}
	if err := set.PauseSchedule(ctx, "beat"); err != nil {
		t.Fatal(err)
	}
	return next
}

func TestBinarySchedules(t *testing.T) {
	url, _, set := seeded(t, expset.WithExpiryEvents())
	code, out, errs := runBin(t, "schedules", "--redis", url, set.Name())
	if code != 0 || !strings.Contains(out, "set "+set.Name()+" has no schedules") {
		t.Fatalf("no schedules: exit %d: %s%s", code, out, errs)
	}
	next := putSchedules(t, set)
	code, out, errs = runBin(t, "schedules", "--redis", url, set.Name())
	if code != 0 || !strings.Contains(out, "nightly   CRON_TZ=Europe/Paris 0 3 * * *  "+next.UTC().Format("2006-01-02T15:04:05.000Z")+"  -") ||
		!strings.Contains(out, "beat      @every 90s                      paused") || !strings.Contains(out, "2 schedule(s) of set "+set.Name()) {
		t.Fatalf("exit %d:\n%s%s", code, out, errs)
	}
	code, out, errs = runBin(t, "schedules", "--json", "--redis", url, set.Name())
	var rep schedulesReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Schedules) != 2 {
		t.Fatalf("--json: exit %d, %v: %s%s", code, err, out, errs)
	}
	beat, nightly := rep.Schedules[0], rep.Schedules[1]
	if beat.ID != "beat" || !beat.Paused || beat.Next != nil || nightly.Next == nil || !nightly.Next.Equal(next) || nightly.CatchUp != 1 {
		t.Fatalf("--json: %+v", rep)
	}
	if code, _, errs = runBin(t, "schedules", "--redis", url, "no-such-set"); code != 3 {
		t.Fatalf("no such set: exit %d, want 3: %s", code, errs)
	}
}
