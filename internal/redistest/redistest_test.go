package redistest

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// TestStoppedServerHoldsPort: from Kill or Stop to Restart, the server's
// port is held (a connection is closed at once and no one else can listen
// on it); the restarted server answers on it again, and once Close has
// run, the port is free.
func TestStoppedServerHoldsPort(t *testing.T) {
	SystemTest(t)
	s := Start(t)
	c := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	ctx := context.Background()
	for _, stop := range []func(){s.Kill, s.Stop} {
		stop()
		if ln, err := net.Listen("tcp", s.Addr); err == nil {
			ln.Close()
			t.Fatalf("%s could be listened on while the server was down", s.Addr)
		}
		conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err != nil {
			t.Fatalf("dial %s while the server was down: %v", s.Addr, err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read from the held port: %d bytes, %v; want the connection closed", n, err)
		}
		conn.Close()
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("PING answered while the server was down")
		}
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING after the restart: %v", err)
		}
	}
	s.Kill()
	s.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)))
	if err != nil {
		t.Fatalf("the port after Close: %v", err)
	}
	ln.Close()
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
