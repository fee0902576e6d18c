// Package redistest starts real redis-server processes for tests.
//
// Every server it starts listens on a free loopback port, keeps its data in a
// temporary directory, has persistence off unless asked, and dies with the test
// process (Pdeathsig), so nothing it starts outlives the test binary and nothing
// touches port 6379 or a server the tests did not start.
//
// Environment:
//   - EXPSET_REDIS_BIN: the server the tests start (see Binary): a directory
//     holding redis-server or valkey-server (and redis-cli or valkey-cli, for
//     clusters), or the path of the server binary itself, with the CLI beside
//     it. Unset, redis-server (else valkey-server) and its CLI are taken from
//     PATH. `.ci/servers redis-7.4.1` prints such a directory.
//   - EXPSET_OLD_REDIS_BIN: the same for a server older than expset supports,
//     which StartOld starts for the tests of the refusal; unset, they skip.
//   - REDIS_ADDR: use this server instead of starting one (tests must then keep
//     to their own keys; nothing here flushes it).
//   - EXPSET_REQUIRE_REDIS=1: fail, instead of skip, when no real Redis can be had.
//   - EXPSET_SYSTEM=1: run the system tests as well (see SystemTest).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Required reports whether tests must fail rather than skip when redis-server
// is unavailable (EXPSET_REQUIRE_REDIS=1).
func Required() bool { return os.Getenv("EXPSET_REQUIRE_REDIS") == "1" }

// Unavailable skips tb, or fails it when Required, saying why. Main reports
// how many tests it skipped.
func Unavailable(tb testing.TB, why string) {
	tb.Helper()
	if Required() {
		tb.Fatalf("real Redis required (EXPSET_REQUIRE_REDIS=1) but unavailable: %s", why)
	}
	skips.note(&skips.redis, why)
	tb.Skipf("skipping real-Redis test: %s (install redis-server, or set EXPSET_REDIS_BIN or REDIS_ADDR)", why)
}

// System reports whether the system tests run (EXPSET_SYSTEM=1).
func System() bool { return os.Getenv("EXPSET_SYSTEM") == "1" }

// SystemTest skips tb unless System. System tests are the long ones that
// start, kill, restart, pause or fail over servers of their own, soak a set
// for seconds, or run long randomized searches: CI runs them (.ci/run sets
// EXPSET_SYSTEM=1), a plain go test does not. Main reports how many it
// skipped.
func SystemTest(tb testing.TB) {
	tb.Helper()
	if !System() {
		skips.note(&skips.system, "")
		tb.Skip("system test: set EXPSET_SYSTEM=1 to run it (CI does)")
	}
}

// skips counts the tests skipped by Unavailable and SystemTest, for Main's
// summary.
var skips skipCounts

type skipCounts struct {
	mu            sync.Mutex
	redis, system int
	why           []string // the reasons Unavailable gave, each once
}

func (c *skipCounts) note(n *int, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*n++
	if why != "" && !slices.Contains(c.why, why) {
		c.why = append(c.why, why)
	}
}

// summary returns the lines Main prints after the tests, or "".
func (c *skipCounts) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	if c.redis > 0 {
		fmt.Fprintf(&b, "redistest: skipped %s needing a real Redis (install redis-server, or set EXPSET_REDIS_BIN or REDIS_ADDR; EXPSET_REQUIRE_REDIS=1 makes this a failure): %s\n",
			tests(c.redis), strings.Join(c.why, "; "))
	}
	if c.system > 0 {
		fmt.Fprintf(&b, "redistest: skipped %s, the system tests (EXPSET_SYSTEM=1 runs them)\n", tests(c.system))
	}
	return b.String()
}

func tests(n int) string {
	if n == 1 {
		return "1 test"
	}
	return strconv.Itoa(n) + " tests"
}

// Server is a redis-server process started by this package.
//
// Once Stop or Kill has ended the process, the Server holds its port (and,
// for a cluster node, its cluster bus port) with a listener that closes
// every connection at once, until Restart starts the process again or
// Close releases them: the kernel hands a freed port out again, and a
// server another test process started on it would answer this one's
// clients in its place. While it is down, clients see their connections
// closed (EOF, connection reset) rather than refused.
type Server struct {
	Addr string
	Dir  string
	Port int

	bin  string // the server binary
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
	held []*portHold // the ports held while the process is down
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Addr returns the address of a real Redis for tb: REDIS_ADDR when set, else a
// redis-server shared by the whole test binary, started on first use. It skips
// tb (or fails it, see Required) when neither is possible.
func Addr(tb testing.TB) string {
	tb.Helper()
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return a
	}
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "expset-redis-*")
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = start(dir, "", FreePort, nil)
	})
	if sharedErr != nil {
		Unavailable(tb, sharedErr.Error())
	}
	return shared.Addr
}

// Client returns a new client of the real Redis that Addr returns, closed when
// tb ends.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(tb)})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Main runs the tests of a package, stops the shared server and the shared
// cluster (see SharedCluster), and prints one line for each kind of test it
// skipped (no real Redis, system tests off), so that the skips show without
// -v. Use it as the body of TestMain. The atExit functions run once the
// tests have ended, before the shared servers stop.
//
// The go command shows what a passing package printed only with -v, -json,
// or when run without package arguments (go test in the package's
// directory); go test ./... discards it.
//
// The tests mostly wait on servers and timers, not on the CPU, so unless
// -parallel is given, Main lets up to 12 parallel tests run at once (or 6
// per GOMAXPROCS, when more) instead of the go command's GOMAXPROCS: on 2
// idle cores the root package took 48-54 s with 8, 41 s with 12 and 38 s
// with 16, and fewer at once leave the tests' short leases more room on a
// loaded machine. Under the race detector the tests are busy on the CPU
// instead: there it stays at 8 (or 4 per GOMAXPROCS), as more took no less
// time and made the short leases of some tests lapse. A test whose
// subtests run in parallel takes a place again once they end unless it is
// parallel itself, and waits for one behind every parallel test still
// queued: so too few places make such a test wait for most of the package.
func Main(m *testing.M, atExit ...func()) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		n := max(12, 6*runtime.GOMAXPROCS(0))
		if raceDetector {
			n = max(8, 4*runtime.GOMAXPROCS(0))
		}
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
	code := m.Run()
	for _, f := range atExit {
		f()
	}
	if shared != nil {
		shared.Close()
		_ = os.RemoveAll(shared.Dir)
	}
	stopSharedCluster()
	fmt.Fprint(os.Stderr, skips.summary())
	os.Exit(code)
}

// Binary returns the path of the server binary the tests start: from
// EXPSET_REDIS_BIN when set, else redis-server or valkey-server on PATH. It
// returns an error saying what is missing.
func Binary() (string, error) {
	server, _, err := binaries("EXPSET_REDIS_BIN")
	return server, err
}

// CLI returns the path of the CLI that goes with Binary (redis-cli or
// valkey-cli), which creates clusters.
func CLI() (string, error) {
	_, cli, err := binaries("EXPSET_REDIS_BIN")
	if err == nil && cli == "" {
		err = errors.New("neither redis-cli nor valkey-cli " + where("EXPSET_REDIS_BIN"))
	}
	return cli, err
}

// OldBinary returns the path of the server binary in EXPSET_OLD_REDIS_BIN,
// or an error saying how to get one.
func OldBinary() (string, error) {
	if os.Getenv("EXPSET_OLD_REDIS_BIN") == "" {
		return "", errors.New("EXPSET_OLD_REDIS_BIN is not set; set it to a server older than 7.0, " +
			"e.g. EXPSET_OLD_REDIS_BIN=$(.ci/servers redis-6.2.16)")
	}
	server, _, err := binaries("EXPSET_OLD_REDIS_BIN")
	return server, err
}

// binaries finds the server and CLI binaries named by the environment
// variable env (a directory, or the server's path with the CLI beside it), or
// on PATH when env is unset. The server is redis-server or valkey-server, the
// CLI redis-cli or valkey-cli ("" when there is none); Valkey 8 builds only
// the valkey-* names.
func binaries(env string) (server, cli string, err error) {
	v := os.Getenv(env)
	if v == "" {
		for _, name := range []string{"redis-server", "valkey-server"} {
			if server, err = exec.LookPath(name); err == nil {
				break
			}
		}
		if server == "" {
			return "", "", errors.New("neither redis-server nor valkey-server is on PATH (or set " + env + ")")
		}
		for _, name := range []string{"redis-cli", "valkey-cli"} {
			if cli, err = exec.LookPath(name); err == nil {
				return server, cli, nil
			}
		}
		return server, "", nil
	}
	dir := v
	if st, err := os.Stat(v); err != nil {
		return "", "", fmt.Errorf("%s=%s: %w", env, v, err)
	} else if !st.IsDir() {
		server, dir = v, filepath.Dir(v)
	}
	if server == "" {
		server = executable(dir, "redis-server", "valkey-server")
		if server == "" {
			return "", "", fmt.Errorf("%s=%s holds neither redis-server nor valkey-server", env, v)
		}
	}
	return server, executable(dir, "redis-cli", "valkey-cli"), nil
}

// executable returns the first of names that is an executable file in dir,
// or "".
func executable(dir string, names ...string) string {
	for _, name := range names {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// where says where binaries named by env are looked for, for error messages.
func where(env string) string {
	if v := os.Getenv(env); v != "" {
		return "beside " + env + "=" + v
	}
	return "is on PATH"
}

// Start starts a dedicated redis-server for tb in its own temporary directory,
// with extra config arguments (e.g. "--appendonly", "yes"), and stops it when tb
// ends (see Close). It skips or fails tb like Addr when redis-server is
// missing.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := start(tb.TempDir(), "", FreePort, func(int) []string { return args })
	if err != nil {
		Unavailable(tb, err.Error())
	}
	tb.Cleanup(s.Close)
	return s
}

// StartOld is Start for the server in EXPSET_OLD_REDIS_BIN (see OldBinary):
// one older than expset supports. It skips tb when the variable is unset,
// saying how to set it, and otherwise fails tb when the server does not start.
func StartOld(tb testing.TB, args ...string) *Server {
	tb.Helper()
	bin, err := OldBinary()
	if os.Getenv("EXPSET_OLD_REDIS_BIN") == "" {
		tb.Skipf("skipping a test on an old server: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	s, err := start(tb.TempDir(), bin, FreePort, func(int) []string { return args })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// start launches the server binary bin (Binary when "") in dir on a port
// from pick, with the extra arguments args returns for that port (args may be
// nil), trying a fresh port when the launch fails (e.g. because another
// process took the port).
func start(dir, bin string, pick func() (int, error), args func(port int) []string) (*Server, error) {
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := pick()
		if err != nil {
			return nil, err
		}
		s := &Server{Dir: dir, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin}
		if args != nil {
			s.args = args(port)
		}
		if err := s.launch(); err != nil {
			lastErr = err
			continue
		}
		return s, nil
	}
	return nil, fmt.Errorf("%s did not start: %w", bin, lastErr)
}

// handedOut holds every port FreePort has returned in this process.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a loopback TCP port that was free a moment ago and that
// it never returned before in this process. The kernel hands a port freed by
// a killed server out again; a test that got it would then serve the
// clients of another test that are still redialling the killed server (its
// resilient loops retry for as long as their test runs), and count their
// connections as its own.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("redistest: no loopback port that was not handed out before")
}

// launch starts the process, releasing the ports held since it stopped
// (see Server) just before.
func (s *Server) launch() error {
	s.release()
	argv := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--dir", s.Dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning",
		"--logfile", "",
	}
	argv = append(argv, s.args...)
	cmd := exec.Command(s.bin, argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.OpenFile(filepath.Join(s.Dir, fmt.Sprintf("redis-%d.log", s.Port)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done, s.log = cmd, done, logf
	s.mu.Unlock()
	if err := waitReady(s.Addr, done, 10*time.Second); err != nil {
		_ = cmd.Process.Kill()
		<-done
		logf.Close()
		return fmt.Errorf("%w; log: %s", err, tail(logf.Name()))
	}
	return nil
}

func waitReady(addr string, done <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	c := probeClient(addr)
	defer c.Close()
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("redis-server exited during start-up")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s not ready after %v", addr, limit)
}

// probeClient returns a client for the harness's own checks: no retries and
// short timeouts, so a dead or paused server makes a check fail quickly.
func probeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, PoolSize: 2, Protocol: 2, DisableIdentity: true,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	return lastChars(string(b), 600)
}

// lastChars returns the last n bytes of s, trimmed of surrounding space.
func lastChars(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// Stop shuts the server down (SIGTERM, then SIGKILL after 5 s), waits for
// it and holds its port until Restart or Close (see Server).
func (s *Server) Stop() { s.signalWait(syscall.SIGTERM, 5*time.Second) }

// Kill kills the server with SIGKILL, waits for it and holds its port
// until Restart or Close (see Server).
func (s *Server) Kill() { s.signalWait(syscall.SIGKILL, 5*time.Second) }

// Close stops the server like Stop and releases its ports: nothing listens
// on them afterwards. Start's and StartCluster's clean-ups call it.
func (s *Server) Close() {
	s.Stop()
	s.release()
}

// Pause stops the process with SIGSTOP; Resume continues it.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Restart stops the server, if it runs, and starts it again on the same
// port and directory, with the same arguments.
func (s *Server) Restart() error {
	s.Stop()
	return s.launch()
}

// Running reports whether the process is still alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redistest: server not running")
	}
	return s.cmd.Process.Signal(sig)
}

func (s *Server) signalWait(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	cmd, done, logf := s.cmd, s.done, s.log
	s.mu.Unlock()
	if cmd == nil || done == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
	if logf != nil {
		logf.Close()
	}
	s.hold()
}

// ports returns the ports the server listens on: its own and, for a
// cluster node, its cluster bus port.
func (s *Server) ports() []int {
	ports := []int{s.Port}
	for i := 0; i+1 < len(s.args); i++ {
		if s.args[i] == "--cluster-enabled" && s.args[i+1] == "yes" {
			ports = append(ports, s.Port+busPortOffset)
		}
	}
	return ports
}

// hold holds the ports of the stopped server (see Server), unless they
// are held already. A port another process took in the instant since the
// process ended is left to it: Restart then fails, saying the address is
// in use.
func (s *Server) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		return
	}
	s.held = []*portHold{} // held, maybe of no port
	for _, port := range s.ports() {
		if h, err := holdPort(port); err == nil {
			s.held = append(s.held, h)
		}
	}
}

// release stops holding the server's ports.
func (s *Server) release() {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for _, h := range held {
		h.close()
	}
}

// portHold is a loopback listener that closes every connection it accepts.
type portHold struct {
	ln   net.Listener
	done chan struct{}
}

func holdPort(port int) (*portHold, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	h := &portHold{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil { // e.g. out of file descriptors for a moment
				time.Sleep(10 * time.Millisecond)
				continue
			}
			_ = c.Close()
		}
	}()
	return h, nil
}

// close stops listening, once the accepting goroutine has returned.
func (h *portHold) close() {
	_ = h.ln.Close()
	<-h.done
}

// Client returns a new client of this server, closed when tb ends.
func (s *Server) Client(tb testing.TB, opt ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr}
	for _, f := range opt {
		f(o)
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Info returns the fields of INFO section as a map.
func Info(ctx context.Context, c redis.UniversalClient, section string) (map[string]string, error) {
	txt, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(txt), nil
}

// parseInfo parses the "key:value" lines of INFO or CLUSTER INFO.
func parseInfo(txt string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}
