package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func checkDemo(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{
		"places order-1       -> placed",
		"places order-4       -> refused: 3 unpaid orders, retry in",
		"retries order-3      -> already placed: no second slot (3 of 3 unpaid)",
		"pays order-2         -> paid: true, slot freed (2 of 3 unpaid)",
		"-> expired unpaid: live=false",
		"unpaid               -> 2 of 3: order-3",
		"places order-5       -> placed: true (3 of 3 unpaid)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoEmbedded(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	code, out, errs := runCLI(t, "demo", "--ttl", "2s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "embedded miniredis") {
		t.Errorf("demo did not say it runs on embedded Redis:\n%s", out)
	}
	checkDemo(t, out)
}

func TestDemoRealRedisLeavesNothing(t *testing.T) {
	t.Parallel() // each demo waits out a ttl
	addr := redistest.Addr(t)
	code, out, errs := runCLI(t, "demo", "--ttl", "2s", "--redis", "redis://"+addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	checkDemo(t, out)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "expset:{demo-orders-*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("demo left keys behind: %v", keys)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage: expset COMMAND"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"demo", "--ttl", "1h"}, 2, "--ttl 1h0m0s: want 500ms to 1m"},
		{[]string{"demo", "--bogus"}, 2, "unknown flag: --bogus (run 'expset demo --help' for its flags)"},
		{[]string{"demo", "extra"}, 2, "unexpected arguments"},
		{[]string{"demo", "--redis", "redis://127.0.0.1:1"}, 1, "connect to Redis at 127.0.0.1:1"},
		{[]string{"demo", "--redis", "http://x"}, 2, "--redis"},
	} {
		code, out, errs := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("expset %v: exit %d, output %q; want exit %d and %q", tc.args, code, out+errs, tc.code, tc.want)
		}
	}
	code, _, errs := runCLI(t, "demo", "--help")
	if code != 0 || !strings.Contains(errs, "Example:") {
		t.Errorf("demo --help: exit %d, %q", code, errs)
	}
}

func TestVerbFirst(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"events tail n", "events tail n"},
		{"events --json dead n", "events dead --json n"},
		{"events --redis r --limit 3 dead n", "events dead --redis r --limit 3 n"},
		{"events --redis=r kick n 1-0", "events kick --redis=r n 1-0"},
		{"events n kick 1-0", "events n kick 1-0"}, // NAME first: no verb, a usage error
		{"events --json n dead", "events --json n dead"},
		{"events -- dead n", "events -- dead n"},
		{"stats --json n", "stats --json n"},
	} {
		if got := strings.Join(verbFirst(strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("verbFirst(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
