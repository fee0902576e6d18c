package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// errNoValgrind means the machine cannot count instructions: the command
// says so and skips.
var errNoValgrind = errors.New("valgrind (callgrind) not found")

// tools finds valgrind and callgrind_control on PATH.
func tools() (valgrind, control string, err error) {
	if valgrind, err = exec.LookPath("valgrind"); err != nil {
		return "", "", errNoValgrind
	}
	if control, err = exec.LookPath("callgrind_control"); err != nil {
		return "", "", errNoValgrind
	}
	return valgrind, control, nil
}

// counted is a redis-server running under callgrind on a free loopback
// port. Its counters are zeroed before each measured workload and dumped
// after it; the dump's total of instructions executed (Ir) covers the
// whole server process: reading and parsing commands, running them,
// writing replies, and the event loop.
type counted struct {
	cmd     *exec.Cmd
	control string
	dir     string
	addr    string
	exited  chan struct{}
}

// startCounted starts server (a redis-server binary) under callgrind with
// snapshots off, hz 1 and active rehashing off, so the server's timer work
// (about 0.15M instructions a second at hz 1, 1.2M at the default hz 10)
// stays below 0.3% of any workload measured here and rehashing happens
// only inside commands, the same way on every run.
func startCounted(server string) (*counted, error) {
	valgrind, control, err := tools()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "servercost-")
	if err != nil {
		return nil, err
	}
	port, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	c := &counted{control: control, dir: dir, addr: "127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{})}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(valgrind, "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "out.%p"),
		server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--hz", "1", "--dynamic-hz", "no", "--activerehashing", "no", "--dir", dir)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = c.cmd.Wait(); _ = log.Close(); close(c.exited) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if conn, err := net.DialTimeout("tcp", c.addr, time.Second); err == nil {
			_ = conn.Close()
			probe := redis.NewClient(&redis.Options{Addr: c.addr, MaxRetries: -1, DialTimeout: time.Minute, ReadTimeout: time.Minute})
			err = probe.Ping(context.Background()).Err()
			_ = probe.Close()
			if err == nil {
				return c, nil
			}
		}
		select {
		case <-c.exited:
			return nil, fmt.Errorf("redis-server under callgrind exited; see %s", log.Name())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("redis-server under callgrind did not answer within 2 minutes; see %s", log.Name())
		}
	}
}

func (c *counted) pid() string { return strconv.Itoa(c.cmd.Process.Pid) }

// zero resets the instruction counters.
func (c *counted) zero() error {
	out, err := exec.Command(c.control, "-z", c.pid()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control -z: %v: %s", err, out)
	}
	return nil
}

// dump writes the counters since the last zero and returns their total of
// instructions executed. With keep set, the dump is copied there (for
// callgrind_annotate).
func (c *counted) dump(keep string) (int64, error) {
	old, _ := filepath.Glob(filepath.Join(c.dir, "out."+c.pid()+".*"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	out, err := exec.Command(c.control, "-d", c.pid()).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("callgrind_control -d: %v: %s", err, out)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		files, _ := filepath.Glob(filepath.Join(c.dir, "out."+c.pid()+".*"))
		for _, f := range files {
			if n, err := totals(f); err == nil {
				if keep != "" {
					if b, err := os.ReadFile(f); err == nil {
						_ = os.WriteFile(keep, b, 0o644)
					}
				}
				return n, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no complete callgrind dump in %s", c.dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// totals reads the "totals:" line of a callgrind dump (its last part, so
// a file that has it is complete): the instructions executed.
func totals(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "totals:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				break
			}
			return strconv.ParseInt(fields[0], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no totals line", path)
}

// stop ends the server and removes its files.
func (c *counted) stop() {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(os.Interrupt)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	_ = os.RemoveAll(c.dir)
}
