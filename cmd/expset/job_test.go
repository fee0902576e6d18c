package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
)

func TestBinaryJob(t *testing.T) {
	t.Parallel()
	url, _, set := seeded(t, expset.WithExpiryEvents())
	due, _, err := set.Put(context.Background(), "rem-1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := runBin(t, "job", "--redis", url, set.Name(), "rem-1")
	if code != 0 || !strings.Contains(out, `job "rem-1" of `+set.Name()+": waiting, due "+due.UTC().Format(time.RFC3339Nano)) {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	code, out, errs = runBin(t, "job", "--json", "--redis", url, set.Name(), "rem-1")
	var rep jobReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.State != "waiting" || rep.Due == nil || !rep.Due.Equal(due) {
		t.Fatalf("--json: exit %d, %+v %v: %s%s", code, rep, err, out, errs)
	}
	code, out, errs = runBin(t, "job", "--redis", url, set.Name(), "never")
	if code != 0 || !strings.Contains(out, "unknown (never put, cancelled, or done)") {
		t.Fatalf("a job never put: exit %d: %s%s", code, out, errs)
	}
	if code, _, errs = runBin(t, "job", "--redis", url, set.Name(), ""); code != 2 {
		t.Fatalf("an empty ID: exit %d, want 2 (usage): %s", code, errs)
	}
}
