package beanstalk

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Environment of a front run in a child process by startFrontProcess.
const (
	helperListen = "EXPSET_BEANSTALK_HELPER_LISTEN" // its address; unset: TestHelperFront does nothing
	helperRedis  = "EXPSET_BEANSTALK_HELPER_REDIS"  // comma-separated: one address, or a cluster's nodes
	helperPrefix = "EXPSET_BEANSTALK_HELPER_PREFIX" // its key prefix
)

// killWait bounds the waits of the kill tests; it only turns a hang into a
// clear failure.
const killWait = 60 * time.Second

// TestHelperFront is not a test: run by startFrontProcess in a child
// process, it serves a front until it is killed.
func TestHelperFront(t *testing.T) {
	listen := os.Getenv(helperListen)
	if listen == "" {
		return
	}
	addrs := strings.Split(os.Getenv(helperRedis), ",")
	var rdb redis.UniversalClient
	if len(addrs) == 1 {
		rdb = redis.NewClient(&redis.Options{Addr: addrs[0]})
	} else {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DisableIdentity: true})
	}
	st, err := NewStore(rdb, os.Getenv(helperPrefix))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	err = NewServer(st, Config{Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}).Serve(context.Background(), ln)
	fmt.Fprintln(os.Stderr, "helper:", err)
	os.Exit(3)
}

// frontProcess is a front in a child process.
type frontProcess struct {
	addr string
	cmd  *exec.Cmd
}

// startFrontProcess starts a front in a child process on addr and waits
// until it accepts connections.
func startFrontProcess(t *testing.T, addr string, redisAddrs []string, prefix string) *frontProcess {
	t.Helper()
	p, err := launchFront(t, addr, redisAddrs, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// launchFront is startFrontProcess for any goroutine: it returns its error.
func launchFront(t *testing.T, addr string, redisAddrs []string, prefix string) (*frontProcess, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFront$")
	cmd.Env = append(os.Environ(), helperListen+"="+addr, helperRedis+"="+strings.Join(redisAddrs, ","), helperPrefix+"="+prefix)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &frontProcess{addr: addr, cmd: cmd}
	t.Cleanup(p.kill)
	deadline := time.Now().Add(killWait)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("front process on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// write sends s on cl.
func write(cl *client, s string) error {
	_, err := cl.nc.Write([]byte(s))
	return err
}

// replyAfter reads a reply unless err (of the write before it) is set.
func replyAfter(cl *client, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return cl.reply()
}

// kill SIGKILLs the front and waits for it.
func (p *frontProcess) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

func freeAddr(t *testing.T) string {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// eachRealBackend runs fn on the shared real server and on the cluster,
// with the addresses a child process needs.
func eachRealBackend(t *testing.T, fn func(t *testing.T, rdb redis.UniversalClient, addrs []string)) {
	t.Run("redis", func(t *testing.T) {
		c := redistest.Client(t)
		fn(t, c, []string{c.Options().Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.SharedCluster(t)
		fn(t, cl.Client(t), cl.Addrs())
	})
}

// TestKillFrontHeldJobComesBackOnce: a front is SIGKILLed while its client
// holds a job; the job is reserved again, through another front, once its
// time to run has ended, and by one client only.
func TestKillFrontHeldJobComesBackOnce(t *testing.T) {
	redistest.SystemTest(t)
	eachRealBackend(t, func(t *testing.T, rdb redis.UniversalClient, addrs []string) {
		prefix := testPrefix(t)
		doomed := startFrontProcess(t, freeAddr(t), addrs, prefix)
		a := dial(t, doomed.addr)
		if r := a.do("put 0 0 2 4\r\nheld\r\n"); r != "INSERTED 1\r\n" {
			t.Fatalf("put: %q", r)
		}
		if r := a.do("reserve\r\n"); r != "RESERVED 1 4\r\nheld\r\n" {
			t.Fatalf("reserve: %q", r)
		}
		killed := time.Now()
		doomed.kill()

		other := startFront(t, rdb, prefix, Config{})
		b, c := dial(t, other), dial(t, other)
		got := b.do("reserve-with-timeout 30\r\n")
		if got != "RESERVED 1 4\r\nheld\r\n" {
			t.Fatalf("after the kill: %q", got)
		}
		if since := time.Since(killed); since < time.Second {
			t.Errorf("the job was reserved again %v after the kill, within the time to run (2 s) of the client of the dead front", since)
		}
		if r := c.do("reserve-with-timeout 0\r\n"); r != "TIMED_OUT\r\n" {
			t.Fatalf("while b holds the job, another reserve got %q", r)
		}
		st := c.do("stats-job 1\r\n")
		if !strings.Contains(st, "state: reserved\n") || !strings.Contains(st, "reserves: 2\n") || !strings.Contains(st, "timeouts: 1\n") {
			t.Fatalf("stats-job: %q", st)
		}
		if r := b.do("delete 1\r\n"); r != "DELETED\r\n" {
			t.Fatalf("delete: %q", r)
		}
		if r := c.do("stats-tube default\r\n"); !strings.Contains(r, "current-jobs-ready: 0\n") || !strings.Contains(r, "current-jobs-reserved: 0\n") {
			t.Fatalf("stats-tube: %q", r)
		}
	})
}

// TestKillFrontsNoJobLost: 10,000 jobs go through three fronts, one of
// which is SIGKILLed (and started again) every half second to second and a half, while
// producers and workers reconnect to whichever front answers. Every job
// whose put was answered is reserved and deleted in the end: none is lost.
func TestKillFrontsNoJobLost(t *testing.T) {
	redistest.SystemTest(t)
	eachRealBackend(t, func(t *testing.T, rdb redis.UniversalClient, addrs []string) {
		prefix := testPrefix(t)
		fronts := make([]*frontProcess, 3)
		var fmu sync.Mutex
		for i := range fronts {
			fronts[i] = startFrontProcess(t, freeAddr(t), addrs, prefix)
		}
		const jobs = 10000
		var mu sync.Mutex
		inserted := map[string]bool{} // bodies whose put was answered
		done := map[string]bool{}     // bodies reserved and deleted
		asked := map[string]bool{}    // bodies whose delete was sent (and maybe done: the answer was lost)
		ctx, cancel := context.WithTimeout(context.Background(), killWait)
		defer cancel()

		// connect dials a front that answers, trying them in turn.
		connect := func(start int) (net.Conn, *client) {
			for i := start; ctx.Err() == nil; i++ {
				fmu.Lock()
				addr := fronts[i%len(fronts)].addr
				fmu.Unlock()
				nc, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					return nc, &client{t: t, nc: nc, r: bufio.NewReader(nc)}
				}
				time.Sleep(10 * time.Millisecond)
			}
			return nil, nil
		}
		var wg sync.WaitGroup
		const producers, workers = 4, 6
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc, cl := connect(p)
				if cl == nil {
					return
				}
				for n := p; n < jobs && ctx.Err() == nil; {
					body := fmt.Sprintf("job-%05d", n)
					err := write(cl, fmt.Sprintf("put 0 0 1 %d\r\n%s\r\n", len(body), body))
					r, err2 := replyAfter(cl, err)
					if err2 != nil {
						nc.Close()
						if nc, cl = connect(p + n); cl == nil {
							return
						}
						continue // put it again: a put without an answer may or may not be in
					}
					if !strings.HasPrefix(r, "INSERTED ") {
						t.Errorf("put: %q", r)
						return
					}
					mu.Lock()
					inserted[body] = true
					mu.Unlock()
					n += producers
				}
				nc.Close()
			}()
		}
		finished := make(chan struct{})
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc, cl := connect(w)
				if cl == nil {
					return
				}
				for ctx.Err() == nil {
					select {
					case <-finished:
						nc.Close()
						return
					default:
					}
					r, err := replyAfter(cl, write(cl, "reserve-with-timeout 1\r\n"))
					if err == nil && strings.HasPrefix(r, "RESERVED ") {
						f := strings.Fields(r)
						body := strings.TrimSuffix(strings.SplitN(r, "\r\n", 2)[1], "\r\n")
						mu.Lock()
						asked[body] = true
						mu.Unlock()
						var d string
						d, err = replyAfter(cl, write(cl, "delete "+f[1]+"\r\n"))
						if err == nil && d == "DELETED\r\n" {
							mu.Lock()
							done[body] = true
							mu.Unlock()
						}
					}
					if err != nil {
						nc.Close()
						if nc, cl = connect(w + 1); cl == nil {
							return
						}
					}
				}
				nc.Close()
			}()
		}
		// The killer: one front every 0.5-1.5 s, started again on its address.
		kills := 0
		killerDone := make(chan struct{})
		go func() {
			defer close(killerDone)
			for {
				select {
				case <-finished:
					return
				case <-ctx.Done():
					return
				case <-time.After(500*time.Millisecond + time.Duration(rand.IntN(1000))*time.Millisecond):
				}
				i := rand.IntN(len(fronts))
				fmu.Lock()
				f := fronts[i]
				fmu.Unlock()
				f.kill()
				kills++
				nf, err := launchFront(t, f.addr, addrs, prefix)
				if err != nil {
					t.Errorf("start a front again: %v", err)
					return
				}
				fmu.Lock()
				fronts[i] = nf
				fmu.Unlock()
			}
		}()
		// Wait until every answered put is deleted (or its delete sent, and
		// then the answer lost with its front) and the queue is empty: a job
		// whose delete was not done would be in it, or reserved again.
		st, err := NewStore(rdb, prefix)
		if err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		for {
			mu.Lock()
			left := 0
			for b := range inserted {
				if !done[b] && !asked[b] {
					left++
				}
			}
			all := len(inserted) == jobs
			mu.Unlock()
			if all && left == 0 {
				ts, err := st.StatsTube(ctx, "default")
				if err == nil && ts.Empty() {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("after %v: %d of %d jobs put, %d of them not yet reserved and deleted (%d kills)", killWait, len(inserted), jobs, left, kills)
			}
			time.Sleep(100 * time.Millisecond)
		}
		close(finished)
		<-killerDone
		wg.Wait()
		t.Logf("%d jobs through three fronts in %v, %d front kills, none lost (%d deletes unanswered)", jobs, time.Since(started).Round(time.Millisecond), kills, len(asked)-len(done))
		if kills == 0 {
			t.Errorf("no front was killed: the run was too short to test anything")
		}
	})
}
