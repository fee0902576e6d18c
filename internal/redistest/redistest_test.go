package redistest

import (
	"context"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestSharedServerAnswers(t *testing.T) {
	c := Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "redistest:probe", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	info, err := Info(ctx, c, "server")
	if err != nil {
		t.Fatal(err)
	}
	if info["redis_version"] == "" {
		t.Fatalf("no redis_version in INFO: %v", info)
	}
}

func TestDedicatedServerRestart(t *testing.T) {
	SystemTest(t)
	s := Start(t, "--appendonly", "yes", "--appendfsync", "always")
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after restart got %q, %v", v, err)
	}
}

func TestSkipSummary(t *testing.T) {
	t.Parallel()
	var c skipCounts
	if s := c.summary(); s != "" {
		t.Fatalf("summary with no skips: %q", s)
	}
	c.note(&c.redis, "redis-server is not on PATH")
	c.note(&c.redis, "redis-server is not on PATH")
	c.note(&c.redis, "redis-cli is not on PATH")
	c.note(&c.system, "")
	want := "redistest: skipped 3 tests needing a real Redis (install redis-server, or set EXPSET_REDIS_BIN or REDIS_ADDR; EXPSET_REQUIRE_REDIS=1 makes this a failure): redis-server is not on PATH; redis-cli is not on PATH\n" +
		"redistest: skipped 1 test, the system tests (EXPSET_SYSTEM=1 runs them)\n"
	if s := c.summary(); s != want {
		t.Fatalf("summary\n%s\nwant\n%s", s, want)
	}
}
