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
