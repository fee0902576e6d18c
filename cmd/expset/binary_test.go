package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

var (
	binPath   string
	buildErr  error
	built     = make(chan struct{}) // closed once the build has ended
	stopBuild = func() {}
)

// startBuild starts building cmd/expset into a new temporary directory, for
// binary. TestMain calls it before any test runs, so that the build overlaps
// the serial tests (none runs the binary) and its goroutines predate every
// test's goleak.IgnoreCurrent.
func startBuild() {
	dir, err := os.MkdirTemp("", "expset-bin-*")
	if err != nil {
		buildErr = err
		close(built)
		return
	}
	binPath = filepath.Join(dir, "expset")
	ctx, cancel := context.WithCancel(context.Background())
	stopBuild = cancel
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "build", "-o", binPath, ".")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) } // the go command cleans up
	if err := cmd.Start(); err != nil {
		buildErr = err
		close(built)
		return
	}
	go func() {
		if err := cmd.Wait(); err != nil {
			buildErr = fmt.Errorf("%v\n%s", err, out.String())
		}
		close(built)
	}()
}

// removeBinary stops the build if it is still under way, and removes the
// binary: TestMain calls it once the tests have ended.
func removeBinary() {
	stopBuild()
	<-built
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
}

// binary returns the path of cmd/expset, built once per test run.
func binary(t *testing.T) string {
	t.Helper()
	<-built
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binPath
}

// runBin runs the expset binary and returns its exit code and output.
func runBin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(os.Environ(), "REDIS_URL=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// seeded opens a fresh set on the real test server, with a clock frozen at a
// known instant so output is predictable, and deletes it afterwards.
func seeded(t *testing.T, opts ...expset.OpenOption) (url string, rdb *redis.Client, set *expset.Set) {
	t.Helper()
	addr := redistest.Addr(t)
	rdb = redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	name := "cli-" + uuid.NewString()[:8]
	set, err := expset.Open(context.Background(), rdb, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { expset.Drop(context.Background(), rdb, name) })
	return "redis://" + addr, rdb, set
}

func TestBinaryInspect(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t)
	ctx := context.Background()
	for _, m := range []string{"order-a", "order-b"} {
		if _, err := set.Add(ctx, "user 1", m, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// An expired member nothing has swept, written last with a clock in the
	// past (a later Add would drop it).
	past := time.Now().Add(-time.Hour)
	old, err := expset.Open(context.Background(), rdb, set.Name(), expset.WithClock(func() time.Time { return past }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Add(ctx, "user 1", "stale", time.Minute); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runBin(t, "inspect", "--redis", url, set.Name(), "user 1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		`owner "user 1": shard`, "MEMBER", "DEADLINE", "LEFT", "STATE",
		"stale", "expired, not yet swept", "order-a", "order-b", "live",
		"2 live, 1 expired awaiting the sweeper",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	// Earliest deadline first: the stale member leads.
	if strings.Index(out, "stale") > strings.Index(out, "order-a") {
		t.Errorf("members not earliest first:\n%s", out)
	}

	code, out, errs = runBin(t, "inspect", "--json", "--redis", url, set.Name(), "user 1")
	if code != 0 {
		t.Fatalf("--json exit %d: %s", code, errs)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	if rep.Live != 2 || rep.Expired != 1 || len(rep.Members) != 3 || !rep.Members[0].Expired || rep.Members[0].Member != "stale" {
		t.Fatalf("--json report %+v", rep)
	}
	// A member is "member" in every JSON output, as in events tail and dead.
	if !strings.Contains(out, `"member": "stale"`) || strings.Contains(out, `"id"`) {
		t.Errorf("--json names a member other than \"member\":\n%s", out)
	}

	code, _, errs = runBin(t, "inspect", "--redis", url, "no-such-set", "u")
	if code != 3 || !strings.Contains(errs, "no set") {
		t.Fatalf("unknown set: exit %d, %q; want exit 3", code, errs)
	}
	code, _, errs = runBin(t, "inspect", set.Name(), "u")
	if code != 2 || !strings.Contains(errs, "no Redis given") {
		t.Fatalf("no --redis: exit %d, %q; want exit 2", code, errs)
	}
	code, _, errs = runBin(t, "inspect", "--redis", url, set.Name())
	if code != 2 {
		t.Fatalf("missing OWNER: exit %d, %q", code, errs)
	}
	code, _, errs = runBin(t, "inspect", "--help")
	if code != 0 || !strings.Contains(errs, "Example:") {
		t.Fatalf("--help: exit %d, %q", code, errs)
	}
}

func TestBinaryDemo(t *testing.T) {
	t.Parallel() // each demo waits out a ttl
	// A ttl the story keeps its order in on a loaded machine (with 2s a
	// late step saw order-3 lapse before it was paid).
	code, out, errs := runBin(t, "demo", "--ttl", "4s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	checkDemo(t, out)
}
