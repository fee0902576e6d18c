package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/expset/expset/cmd/expset/internal/beanstalk"
	"github.com/expset/expset/internal/redistest"
)

// TestBeanstalkdCommand: "expset beanstalkd" serves the protocol on the
// address it prints, and on SIGTERM stops (exit 0), putting the job its
// client held back ready.
func TestBeanstalkdCommand(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	prefix := fmt.Sprintf("bscli%d", os.Getpid())
	r := startBin(t, "beanstalkd", "--redis", rdb.Options().Addr, "--listen", "127.0.0.1:0", "--prefix", prefix)
	line := r.line("serving beanstalkd's protocol on ")
	addr := strings.Fields(strings.SplitN(line, " on ", 2)[1])[0]
	addr = strings.TrimSuffix(addr, ",")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	for _, step := range []struct{ send, want string }{
		{"put 0 0 60 5\r\nhello\r\n", "INSERTED 1\r\n"},
		{"reserve\r\n", "RESERVED 1 5\r\n"},
	} {
		if _, err := nc.Write([]byte(step.send)); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(wait))
		got, err := br.ReadString('\n')
		if err != nil || got != step.want {
			t.Fatalf("%q: %q, %v; want %q", step.send, got, err, step.want)
		}
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	case <-time.After(wait):
		t.Fatalf("still running %v after SIGTERM", wait)
	}
	if r.code != 0 {
		t.Fatalf("exit code %d after SIGTERM; stderr:\n%s", r.code, r.stderr.String())
	}
	st, err := beanstalk.NewStore(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := st.StatsTube(context.Background(), "default")
	if err != nil || ts.Ready != 1 || ts.Reserved != 0 {
		t.Fatalf("after the stop: %+v, %v; want the held job ready again", ts, err)
	}
	keys, err := rdb.Keys(context.Background(), prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(context.Background(), keys...)
}

func TestBeanstalkdUsage(t *testing.T) {
	for _, args := range [][]string{
		{"beanstalkd", "--redis", "127.0.0.1:1", "-z", "0"},
		{"beanstalkd", "--redis", "127.0.0.1:1", "--poll", "1ms"},
		{"beanstalkd", "--redis", "127.0.0.1:1", "extra"},
	} {
		if code, _, errs := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errs)
		}
	}
}
