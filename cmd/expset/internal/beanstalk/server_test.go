package beanstalk

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestServeStopsCleanly: a stopped front leaves no goroutine behind, answers
// nothing more, and the job its client held is ready again at once (the
// connection closed, as beanstalkd does when a client goes).
func TestServeStopsCleanly(t *testing.T) {
	leaks(t)
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st, err := NewStore(rdb, "stop")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(st, Config{}).Serve(ctx, ln) }()
	a, b := dial(t, ln.Addr().String()), dial(t, ln.Addr().String())
	if r := a.do("put 0 0 100 2\r\nhi\r\n"); r != "INSERTED 1\r\n" {
		t.Fatalf("put: %q", r)
	}
	if r := a.do("reserve\r\n"); r != "RESERVED 1 2\r\nhi\r\n" {
		t.Fatalf("reserve: %q", r)
	}
	b.send("reserve\r\n") // waits
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if r, err := b.reply(); err == nil {
		t.Fatalf("a waiting reserve got %q after the front stopped", r)
	}
	j, _, err := st.Reserve(context.Background(), "default", "other", 0)
	if err != nil || j == nil || j.ID != 1 {
		t.Fatalf("after the stop the held job should be ready: %+v, %v", j, err)
	}
}

// TestFrontsShareOneQueue: two fronts on one Redis serve one queue: IDs are
// unique across them, a reserve waiting on one wakes for a put on the
// other, a job held through one is not given by the other, and only the
// holder's connection may delete it.
func TestFrontsShareOneQueue(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Parallel()
		p := testPrefix(t)
		f1, f2 := startFront(t, rdb, p, Config{}), startFront(t, rdb, p, Config{})
		a, b, c := dial(t, f1), dial(t, f2), dial(t, f2)
		b.send("reserve-with-timeout 10\r\n")
		time.Sleep(100 * time.Millisecond) // let it wait: the wake-up must cross fronts
		if r := a.do("put 5 0 100 1\r\nx\r\n"); r != "INSERTED 1\r\n" {
			t.Fatalf("put on front 1: %q", r)
		}
		if r, err := b.reply(); err != nil || r != "RESERVED 1 1\r\nx\r\n" {
			t.Fatalf("reserve waiting on front 2: %q, %v", r, err)
		}
		if r := c.do("put 5 0 100 1\r\ny\r\n"); r != "INSERTED 2\r\n" {
			t.Fatalf("put on front 2: %q", r)
		}
		if r := a.do("reserve-with-timeout 0\r\n"); r != "RESERVED 2 1\r\ny\r\n" {
			t.Fatalf("reserve on front 1: %q", r)
		}
		if r := a.do("reserve-with-timeout 0\r\n"); r != "TIMED_OUT\r\n" {
			t.Fatalf("job 1 is held through front 2, front 1 gave: %q", r)
		}
		for _, cmd := range []string{"delete 1\r\n", "release 1 0 0\r\n", "bury 1 0\r\n", "touch 1\r\n"} {
			if r := a.do(cmd); r != "NOT_FOUND\r\n" {
				t.Errorf("%q from another front's client: %q", cmd, r)
			}
		}
		if r := b.do("delete 1\r\n"); r != "DELETED\r\n" {
			t.Fatalf("delete by the holder: %q", r)
		}
		if r := a.do("stats-job 1\r\n"); r != "NOT_FOUND\r\n" {
			t.Fatalf("stats-job of a deleted job: %q", r)
		}
		if r := b.do("peek 2\r\n"); r != "FOUND 2 1\r\ny\r\n" {
			t.Fatalf("peek through the other front: %q", r)
		}
	})
}

// TestReserveManyClientsNoJobTwice: clients on three fronts reserve and
// delete jobs put concurrently; every job is reserved exactly once.
func TestReserveManyClientsNoJobTwice(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Parallel()
		p := testPrefix(t)
		fronts := []string{startFront(t, rdb, p, Config{}), startFront(t, rdb, p, Config{}), startFront(t, rdb, p, Config{})}
		const jobs = 120
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for w := range 6 {
			cl := dial(t, fronts[w%3])
			cl.do("watch other\r\n")
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					cl.send("reserve-with-timeout 1\r\n")
					r, err := cl.reply()
					if err != nil || !strings.HasPrefix(r, "RESERVED ") {
						return
					}
					id := strings.Fields(r)[1]
					mu.Lock()
					seen[id]++
					mu.Unlock()
					cl.send("delete " + id + "\r\n")
					if r, err := cl.reply(); err != nil || r != "DELETED\r\n" {
						t.Errorf("delete %s: %q %v", id, r, err)
						return
					}
				}
			}()
		}
		producers := []*client{dial(t, fronts[0]), dial(t, fronts[1]), dial(t, fronts[2])}
		producers[1].do("use other\r\n")
		for i := range jobs {
			if r := producers[i%3].do("put 1 0 100 1\r\nj\r\n"); !strings.HasPrefix(r, "INSERTED ") {
				t.Fatalf("put: %q", r)
			}
		}
		wg.Wait()
		if len(seen) != jobs {
			t.Errorf("%d jobs reserved, want %d", len(seen), jobs)
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("job %s reserved %d times", id, n)
			}
		}
	})
}

// TestReserveSurvivesRedisRestart: while Redis is down, commands answer
// INTERNAL_ERROR (and the connection goes on) and a waiting reserve keeps
// trying, reporting the failure; when Redis is back, it gets the job put
// then.
func TestReserveSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var mu sync.Mutex
	var logged []string
	addr := startFront(t, rdb, testPrefix(t), Config{Poll: 50 * time.Millisecond, Logf: func(f string, a ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		mu.Unlock()
	}})
	waiter, other := dial(t, addr), dial(t, addr)
	waiter.send("reserve-with-timeout 20\r\n")
	srv.Stop()
	if r := other.do("put 0 0 10 1\r\nx\r\n"); r != "INTERNAL_ERROR\r\n" {
		t.Fatalf("put with Redis down: %q", r)
	}
	reported := func() bool {
		mu.Lock()
		defer mu.Unlock()
		all := strings.Join(logged, "\n")
		return strings.Contains(all, "reserve (retrying)") && strings.Contains(all, "wake-ups (pub/sub")
	}
	for wait := time.Now().Add(10 * time.Second); !reported(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("the waiting reserve's failures were not reported: %q", logged)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := other.do("put 0 0 10 1\r\ny\r\n")
		if strings.HasPrefix(r, "INSERTED ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put after Redis came back: %q", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r, err := waiter.reply(); err != nil || !strings.HasPrefix(r, "RESERVED ") || !strings.HasSuffix(r, "\r\ny\r\n") {
		t.Fatalf("the waiting reserve after Redis came back: %q, %v", r, err)
	}
}
