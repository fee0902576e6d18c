package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	startBuild()
	redistest.Main(m, removeBinary)
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// checkDemo checks that out tells the demo's whole story, in its order.
func checkDemo(t *testing.T, out string) {
	t.Helper()
	at := 0
	for _, want := range []string{
		"1. Orders under a quota",
		"user-42 places order-1     -> placed, pay within",
		"user-42 places order-4     -> refused: 3 unpaid orders, retry in",
		"user-42 retries order-3    -> already placed: no second slot (3 of 3 unpaid)",
		"user-42 pays order-2       -> paid, so removed: slot freed (2 of 3 unpaid)",
		"user-42 places order-4     -> placed, pay within",
		"2. Nobody pays order-1",
		"order-1                    -> lapses unpaid: no read sees it from its deadline on (live=false)",
		"sweeper                    -> removes order-1 ",
		"after its deadline and writes its expiry event",
		`consumer billing/worker-1  -> cancels order-1 of user-42 (payload {"order":"order-1","sku":"mug-1","qty":1}, attempt 1)`,
		"3. Waiting for a slot (Quota.AcquireWait)",
		"user-42 places order-5     -> placed, pay within",
		"user-42 places order-6     -> waits in line: 3 of 3 unpaid",
		"user-42 pays order-3       -> paid, so removed: the first in line is woken at once",
		"user-42's order-6          -> placed after waiting ",
		"in order-3's slot (3 of 3 unpaid: order-4, order-5, order-6)",
		"expset demo: the whole story took",
	} {
		i := strings.Index(out[at:], want)
		if i < 0 {
			t.Errorf("demo output lacks %q after byte %d:\n%s", want, at, out)
			continue
		}
		at += i + len(want)
	}
}

func TestDemoEmbedded(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	current := goleak.IgnoreCurrent()
	code, out, errs := runCLI(t, "demo") // the default --ttl, as a newcomer runs it
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "embedded miniredis") {
		t.Errorf("demo did not say it runs on embedded Redis:\n%s", out)
	}
	if errs != "" {
		t.Errorf("demo wrote to stderr: %s", errs)
	}
	checkDemo(t, out)
	// The sweeper, the consumer and the waiter are gone when it returns.
	goleak.VerifyNone(t, current, goleak.IgnoreAnyFunction("github.com/expset/expset/internal/redistest.(*Server).launch.func1"))
}

// TestDemoRealRedisLeavesNothing plays the demo on a real server and on the
// three-master cluster: the same story, and no key left behind.
func TestDemoRealRedisLeavesNothing(t *testing.T) {
	t.Parallel() // each demo waits out a ttl
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		addr := redistest.Addr(t)
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		checkDemoLeavesNothing(t, c, "redis://"+addr)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cluster := redistest.SharedCluster(t)
		checkDemoLeavesNothing(t, cluster.Client(t), strings.Join(cluster.Addrs(), ","))
	})
}

func checkDemoLeavesNothing(t *testing.T, rdb redis.UniversalClient, url string) {
	code, out, errs := runCLI(t, "demo", "--ttl", "4s", "--redis", url) // as TestBinaryDemo
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	checkDemo(t, out)
	ctx := context.Background()
	const pattern = "expset:{demo-orders-*"
	var keys []string
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); !ok {
		keys, err = rdb.Keys(ctx, pattern).Result()
	} else {
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			ks, err := c.Keys(ctx, pattern).Result()
			mu.Lock()
			keys = append(keys, ks...)
			mu.Unlock()
			return err
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("demo left keys behind: %v", keys)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
