package beanstalk

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // the tests report what they meet themselves
	redistest.Main(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// startBeanstalkd starts Debian's beanstalkd (in memory) on a free loopback
// port for the test and returns its address. Without it the test skips, or
// fails when EXPSET_REQUIRE_BEANSTALKD=1 (CI). A port taken between its
// choice and beanstalkd's bind (by a server another test started) is
// found by whose socket listens on it (listens), and another port is
// tried.
func startBeanstalkd(t testing.TB, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("beanstalkd")
	if err != nil {
		if os.Getenv("EXPSET_REQUIRE_BEANSTALKD") == "1" {
			t.Fatalf("beanstalkd required (EXPSET_REQUIRE_BEANSTALKD=1) but not on PATH: %v", err)
		}
		t.Skip("beanstalkd not installed (apt-get install beanstalkd): skipping the comparison with it")
	}
	var last error
	for range 5 {
		addr, err := runBeanstalkd(t, bin, args)
		if err == nil {
			return addr
		}
		last = err
	}
	t.Fatalf("beanstalkd: %v", last)
	return ""
}

// runBeanstalkd starts bin on a free port and returns its address once the
// process started listens there.
func runBeanstalkd(t testing.TB, bin string, args []string) (string, error) {
	port, err := redistest.FreePort()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, append([]string{"-l", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() { _ = cmd.Process.Kill(); <-exited }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return "", fmt.Errorf("beanstalkd on %s exited at start (its port taken?)", addr)
		default:
		}
		if listens(cmd.Process.Pid, port) {
			t.Cleanup(stop)
			return addr, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("beanstalkd on %s: not listening after 10s", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listens reports whether process pid holds the socket listening on
// 127.0.0.1:port (Linux: /proc/net/tcp gives the socket's inode, the
// process's fds link to "socket:[inode]").
func listens(pid, port int) bool {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	inode := ""
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[3] == "0A" { // 0A: LISTEN
			inode = f[9]
		}
	}
	if inode == "" {
		return false
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && l == "socket:["+inode+"]" {
			return true
		}
	}
	return false
}

// leaks checks, when the test and its cleanups are done, that the test
// left no goroutine of its own running. Call it first.
func leaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

var prefixes atomic.Int64

// testPrefix is a key prefix no other test uses.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("bstest%d-%d", os.Getpid(), prefixes.Add(1))
}

// startFront serves a front on rdb on a free loopback port until the test
// ends and returns its address.
func startFront(t testing.TB, rdb redis.UniversalClient, prefix string, cfg Config) string {
	t.Helper()
	st, err := NewStore(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropKeys(rdb, prefix) }) // after the front has stopped
	if cfg.Logf == nil {
		cfg.Logf = func(f string, a ...any) { t.Logf(f, a...) }
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(st, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// dropKeys deletes the keys under prefix (on every master of a cluster).
func dropKeys(rdb redis.UniversalClient, prefix string) {
	ctx := context.Background()
	drop := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		return iter.Err()
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, drop)
	case *redis.Client:
		_ = drop(ctx, c)
	}
}

// client is a raw protocol client for tests.
type client struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("send %q: %v", s, err)
	}
}

// reply reads one reply: its line and, for replies with a body, the body.
func (c *client) reply() (string, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(replyWait))
	line, err := c.r.ReadString('\n')
	if err != nil {
		return line, err
	}
	f := strings.Fields(line)
	if len(f) >= 2 && (f[0] == "RESERVED" || f[0] == "FOUND" || f[0] == "OK") {
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			return line, err
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, body); err != nil {
			return line, err
		}
		return line + string(body), nil
	}
	return line, nil
}

// do sends a command and returns its reply.
func (c *client) do(s string) string {
	c.t.Helper()
	c.send(s)
	r, err := c.reply()
	if err != nil {
		c.t.Fatalf("reply to %q: %v (%q)", s, err, r)
	}
	return r
}

// replyWait is how long a test waits for a reply that should come.
var replyWait = 5 * time.Second
