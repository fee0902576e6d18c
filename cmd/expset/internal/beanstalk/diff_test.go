package beanstalk

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A step of a conversation: client c sends send (where $N is the Nth job ID
// this server has shown, from 1), then reads read replies; or, with sleep,
// the conversation waits.
type step struct {
	c      int
	send   string
	read   int
	sleep  time.Duration
	settle bool // on a front, send again until the reply is beanstalkd's (a state the front reaches in its own time)
}

func do(c int, s string) step   { return step{c: c, send: s, read: 1} }
func send(c int, s string) step { return step{c: c, send: s} }
func read(c int) step           { return step{c: c, read: 1} }
func sleep(d time.Duration) step {
	return step{sleep: d}
}

// settle is do for a command whose answer on a front depends on work the
// front finishes in its own goroutines (a closed connection's bookkeeping):
// the front is asked again, until a deadline, until it answers as beanstalkd
// did.
func settle(c int, s string) step { return step{c: c, send: s, read: 1, settle: true} }

// volatile are the stats fields that differ by process or by the clock.
var volatile = map[string]bool{
	"pid": true, "version": true, "rusage-utime": true, "rusage-stime": true, "uptime": true,
	"hostname": true, "os": true, "platform": true, "binlog-oldest-index": true,
	"binlog-current-index": true, "binlog-records-migrated": true, "binlog-records-written": true,
	"binlog-max-size": true, "total-connections": true, "age": true, "time-left": true,
}

var idRef = regexp.MustCompile(`\$(\d+)`)

// conversation runs steps against the server at addr and returns each reply,
// with job IDs shown as #N (the Nth ID seen) and stats bodies reduced to
// their sorted fields that do not vary by process or clock.
func conversation(t *testing.T, addr string, clients int, steps []step, want []string) []string {
	var ids []string // the IDs seen, in order
	idx := func(id string) string {
		i := slices.Index(ids, id)
		if i < 0 {
			ids = append(ids, id)
			i = len(ids) - 1
		}
		return "#" + strconv.Itoa(i+1)
	}
	cs := make([]*client, clients)
	for i := range cs {
		cs[i] = dial(t, addr)
	}
	var out []string
	for n, s := range steps {
		if s.sleep > 0 {
			time.Sleep(s.sleep)
			continue
		}
		if s.send != "" {
			cmd := idRef.ReplaceAllStringFunc(s.send, func(m string) string {
				k, _ := strconv.Atoi(m[1:])
				if k-1 < len(ids) {
					return ids[k-1]
				}
				return "999999"
			})
			cs[s.c].send(cmd)
		}
		deadline := time.Now().Add(10 * time.Second)
		for k := 0; k < s.read; k++ {
			r, err := cs[s.c].reply()
			if err != nil {
				r = fmt.Sprintf("error %q (read %q)", err.Error(), r)
				if strings.Contains(err.Error(), "EOF") {
					r = "EOF"
				}
			}
			line := fmt.Sprintf("%d c%d %q -> %s", n, s.c, short(s.send), normalize(r, idx))
			if s.settle && len(out) < len(want) && line != want[len(out)] && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
				cs[s.c].send(s.send)
				k--
				continue
			}
			out = append(out, line)
		}
	}
	return out
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

func normalize(r string, idx func(string) string) string {
	line, body, _ := strings.Cut(r, "\r\n")
	f := strings.Fields(line)
	if len(f) == 0 {
		return r
	}
	switch f[0] {
	case "INSERTED", "BURIED", "RESERVED", "FOUND":
		if len(f) >= 2 {
			f[1] = idx(f[1])
		}
		return strings.Join(f, " ") + " " + strconv.Quote(body)
	case "OK":
		var lines []string
		for _, l := range strings.Split(strings.TrimSuffix(body, "\r\n"), "\n") {
			k, v, ok := strings.Cut(l, ": ")
			if ok && volatile[k] {
				continue
			}
			if ok && k == "id" && !strings.Contains(body, "\npid: ") {
				l = "id: " + idx(v)
			} else if ok && k == "id" {
				continue
			}
			lines = append(lines, l)
		}
		slices.Sort(lines)
		return "OK " + strings.Join(lines, " | ")
	}
	return line
}

// compare runs the conversation on beanstalkd and, at the same time, on a
// front on each backend, and fails where a front's replies differ.
func compare(t *testing.T, clients int, steps []step) {
	t.Helper()
	t.Parallel()
	bs := startBeanstalkd(t)
	if os.Getenv("EXPSET_BEANSTALKD_ONLY") != "" {
		replyWait = 300 * time.Millisecond
		t.Logf("beanstalkd:\n%s", strings.Join(conversation(t, bs, clients, steps, nil), "\n"))
		return
	}
	var mu sync.Mutex
	got := map[string][]string{}
	// With settle steps the fronts need beanstalkd's answers first; without,
	// all run at once.
	first := slices.ContainsFunc(steps, func(s step) bool { return s.settle })
	var answers []string
	if first {
		answers = conversation(t, bs, clients, steps, nil)
		got["beanstalkd"] = answers
	}
	t.Run("run", func(t *testing.T) {
		if !first {
			t.Run("beanstalkd", func(t *testing.T) {
				t.Parallel()
				r := conversation(t, bs, clients, steps, nil)
				mu.Lock()
				got["beanstalkd"] = r
				mu.Unlock()
			})
		}
		redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
			t.Parallel()
			front := startFront(t, rdb, testPrefix(t), Config{})
			r := conversation(t, front, clients, steps, answers)
			mu.Lock()
			got[t.Name()] = r
			mu.Unlock()
		})
	})
	want := got["beanstalkd"]
	if want == nil {
		return // skipped or failed: said so
	}
	for name, g := range got {
		if name == "beanstalkd" {
			continue
		}
		for i := range max(len(want), len(g)) {
			w, f := "(none)", "(none)"
			if i < len(want) {
				w = want[i]
			}
			if i < len(g) {
				f = g[i]
			}
			if w != f {
				t.Errorf("%s: reply %d:\nbeanstalkd: %s\nfront:      %s", name, i, w, f)
			}
		}
	}
}

func TestDiffLifecycle(t *testing.T) {
	compare(t, 1, []step{
		do(0, "put 5 0 10 3\r\nabc\r\n"),
		do(0, "put 1 0 10 2\r\nhi\r\n"),
		do(0, "put 1 0 10 0\r\n\r\n"),
		do(0, "peek-ready\r\n"),
		do(0, "peek $1\r\n"),
		do(0, "peek-delayed\r\n"),
		do(0, "peek-buried\r\n"),
		do(0, "reserve\r\n"),
		do(0, "stats-job $2\r\n"),
		do(0, "release $2 7 0\r\n"),
		do(0, "release $2 7 0\r\n"),
		do(0, "reserve\r\n"),
		do(0, "bury $3 3\r\n"),
		do(0, "peek-buried\r\n"),
		do(0, "stats-job $3\r\n"),
		do(0, "reserve\r\n"),
		do(0, "touch $1\r\n"),
		do(0, "touch $2\r\n"),
		do(0, "delete $1\r\n"),
		do(0, "delete $1\r\n"),
		do(0, "kick 10\r\n"),
		do(0, "kick 10\r\n"),
		do(0, "stats-job $3\r\n"),
		do(0, "reserve-job $3\r\n"),
		do(0, "reserve-job $3\r\n"),
		do(0, "bury $3 0\r\n"),
		do(0, "kick-job $3\r\n"),
		do(0, "kick-job $3\r\n"),
		do(0, "stats-tube default\r\n"),
		do(0, "reserve-with-timeout 0\r\n"),
		do(0, "reserve-with-timeout 0\r\n"),
		do(0, "reserve-with-timeout 0\r\n"),
		do(0, "stats\r\n"),
		do(0, "delete $2\r\n"),
		do(0, "delete $3\r\n"),
		do(0, "stats-job $3\r\n"),
		do(0, "peek $3\r\n"),
		do(0, "stats\r\n"),
	})
}

func TestDiffTubes(t *testing.T) {
	long := strings.Repeat("a", 200)
	compare(t, 2, []step{
		do(0, "list-tube-used\r\n"),
		do(0, "list-tubes-watched\r\n"),
		do(0, "list-tubes\r\n"),
		do(0, "use "+long+"\r\n"),
		do(0, "use "+long+"b\r\n"),
		do(0, "use -x\r\n"),
		do(0, "use x{y}\r\n"),
		do(0, "use  x\r\n"),
		do(0, "use a-b+c/d;e.f$g_h(i)\r\n"),
		do(0, "use t1\r\n"),
		do(0, "put 9 0 10 2\r\nt1\r\n"),
		do(0, "put 2 0 10 2\r\nt1\r\n"),
		do(0, "use t2\r\n"),
		do(0, "put 2 0 10 2\r\nt2\r\n"),
		do(0, "put 0 0 10 2\r\nt2\r\n"),
		do(0, "list-tubes\r\n"),
		do(0, "stats-tube t1\r\n"),
		do(0, "stats-tube nope\r\n"),
		do(0, "stats-tube -x\r\n"),
		do(1, "watch t1\r\n"),
		do(1, "watch t1\r\n"),
		do(1, "watch t2\r\n"),
		do(1, "ignore default\r\n"),
		do(1, "ignore nope\r\n"),
		do(1, "list-tubes-watched\r\n"),
		do(1, "reserve\r\n"),
		do(1, "reserve\r\n"),
		do(1, "reserve\r\n"),
		do(1, "reserve\r\n"),
		do(1, "ignore t1\r\n"),
		do(1, "ignore t2\r\n"),
		do(1, "list-tubes-watched\r\n"),
		do(0, "stats-tube t2\r\n"),
		do(0, "pause-tube nope 1\r\n"),
		do(0, "pause-tube t2 0\r\n"),
		do(0, "pause-tube -t2 0\r\n"),
		do(0, "pause-tube t2\r\n"),
		do(0, "pause-tube t2 x\r\n"),
		do(0, "pause-tube t2 1 2\r\n"),
		send(1, "quit\r\n"),
		settle(0, "stats-tube t2\r\n"),
	})
}

func TestDiffBadInput(t *testing.T) {
	compare(t, 1, []step{
		do(0, "use bad\r\n"),
		do(0, "bogus\r\n"),
		do(0, "put\r\n"),
		do(0, "put 1 2 3\r\n"),
		do(0, "put a 0 10 1\r\n"),
		do(0, "put -1 0 10 1\r\n"),
		do(0, "put 4294967296 0 10 1\r\n"),
		do(0, "put 4294967295 4294967295 4294967295 1\r\nx\r\n"),
		do(0, "put 1 0 10 1 \r\n"),
		do(0, "put 1 0 10 1x\r\n"),
		do(0, "put 1 0 10 65536\r\n"+strings.Repeat("z", 65536)+"\r\n"),
		do(0, "put 1 0 10 4294967296\r\n"),
		{c: 0, send: "put 1 0 10 70000\r\n" + strings.Repeat("z", 70000) + "\r\nput 1 0 10 1\r\ny\r\n", read: 2},
		do(0, "put 1 0 10 65535\r\n"+strings.Repeat("z", 65535)+"\r\n"),
		{c: 0, send: "put 1 0 10 2\r\nabcd\r\n", read: 2},
		do(0, "put 1 0 10 3\r\nab\r\n\r\n"),
		do(0, strings.Repeat("x", 300)+"\r\n"),
		do(0, "peek-ready\r\n"),
		do(0, strings.Repeat("y", 221)+"\r\n"),
		do(0, strings.Repeat("y", 222)+"\r\n"),
		do(0, "stats\x00\r\n"),
		do(0, "stats \r\n"),
		do(0, "statsx\r\n"),
		do(0, "reserve \r\n"),
		do(0, "reserve-job\r\n"),
		do(0, "reserve-with-timeout\r\n"),
		do(0, "reserve-with-timeout x\r\n"),
		do(0, "reserve-with-timeout 4294967296\r\n"),
		do(0, "reserve-with-timeout 99999999999999999999\r\n"),
		do(0, "reserve-with-timeout -0\r\n"),
		do(0, "reserve-with-timeout 0 trailing\r\n"),
		do(0, "reserve-with-timeout  0\r\n"),
		do(0, "delete\r\n"),
		do(0, "delete \r\n"),
		do(0, "delete x\r\n"),
		do(0, "delete -1\r\n"),
		do(0, "delete 18446744073709551615\r\n"),
		do(0, "delete 18446744073709551616\r\n"),
		do(0, "delete 99999999999999999999999\r\n"),
		do(0, "delete 1 \r\n"),
		do(0, "delete  1\r\n"),
		do(0, "release 1\r\n"),
		do(0, "release 1 2\r\n"),
		do(0, "release 1 2 3\r\n"),
		do(0, "release 1 4294967296 3\r\n"),
		do(0, "bury 1\r\n"),
		do(0, "bury 1 2\r\n"),
		do(0, "touch x\r\n"),
		do(0, "kick\r\n"),
		do(0, "kick \r\n"),
		do(0, "kick x\r\n"),
		do(0, "kick 0\r\n"),
		do(0, "kick -1\r\n"),
		do(0, "kick 4294967296\r\n"),
		do(0, "kick 99999999999999999999999\r\n"),
		do(0, "kick 5 trailing\r\n"),
		do(0, "kick +3\r\n"),
		do(0, "kick-job x\r\n"),
		do(0, "kick-job 77\r\n"),
		do(0, "stats-job\r\n"),
		do(0, "stats-job 77\r\n"),
		do(0, "peek\r\n"),
		do(0, "peek 77\r\n"),
		do(0, "peek-readyx\r\n"),
		do(0, "peek-delayed \r\n"),
		do(0, "list-tubesx\r\n"),
		do(0, "list-tube-used x\r\n"),
		do(0, "use\r\n"),
		do(0, "watch\r\n"),
		do(0, "ignore\r\n"),
		do(0, "stats-tube\r\n"),
		do(0, "PUT 1 0 10 1\r\n"),
		do(0, "\r\n"),
		do(0, " stats\r\n"),
		do(0, "list-tube-used\r\n"),
		do(0, "stats\r\n"),
		do(0, "quitx\r\n"),
	})
}

func TestDiffClients(t *testing.T) {
	compare(t, 3, []step{
		send(0, "reserve\r\n"),
		sleep(50 * time.Millisecond),
		do(1, "put 3 0 10 1\r\na\r\n"),
		read(0),
		do(1, "delete $1\r\n"),
		do(1, "release $1 1 0\r\n"),
		do(1, "bury $1 1\r\n"),
		do(1, "touch $1\r\n"),
		do(1, "reserve-job $1\r\n"),
		do(1, "kick-job $1\r\n"),
		do(1, "stats-job $1\r\n"),
		do(2, "reserve-with-timeout 0\r\n"),
		do(0, "release $1 2 0\r\n"),
		do(2, "reserve-with-timeout 1\r\n"),
		send(1, "reserve-with-timeout 5\r\n"),
		sleep(50 * time.Millisecond),
		send(2, "quit\r\n"),
		read(1),
		do(1, "stats-job $1\r\n"),
		do(1, "delete $1\r\n"),
		do(0, "use other\r\n"),
		send(1, "reserve-with-timeout 5\r\n"),
		sleep(50 * time.Millisecond),
		do(0, "put 1 0 10 1\r\nb\r\n"),
		do(0, "use default\r\n"),
		do(0, "put 1 0 10 1\r\nc\r\n"),
		read(1),
		do(1, "delete $3\r\n"),
	})
}

func TestDiffTimes(t *testing.T) {
	compare(t, 2, []step{
		do(0, "put 1 1 1 1\r\nd\r\n"),
		do(0, "peek-delayed\r\n"),
		do(0, "stats-job $1\r\n"),
		do(0, "reserve-with-timeout 0\r\n"),
		do(0, "reserve-with-timeout 3\r\n"),
		do(0, "stats-job $1\r\n"),
		// Its time to run is one second: all of it is the safety margin.
		do(0, "reserve-with-timeout 3\r\n"),
		do(0, "reserve\r\n"),
		sleep(1300 * time.Millisecond),
		// beanstalkd 1.12 can miss a time to run whose tick came a little
		// early, until the holder's connection is scheduled again: a command
		// of the holder's does it.
		do(0, "list-tube-used\r\n"),
		do(1, "reserve-with-timeout 0\r\n"),
		do(1, "stats-job $1\r\n"),
		do(0, "delete $1\r\n"),
		do(1, "release $1 1 1\r\n"),
		do(1, "peek-delayed\r\n"),
		do(1, "kick 1\r\n"),
		do(1, "peek-ready\r\n"),
		do(0, "pause-tube default 1\r\n"),
		do(0, "reserve-with-timeout 0\r\n"),
		do(0, "reserve-with-timeout 3\r\n"),
		do(0, "stats-job $1\r\n"),
		// DEADLINE_SOON reaching a reserve that waits: a TTR of 2 s enters its
		// last second while the holder waits for another job.
		do(1, "use dl\r\n"),
		do(1, "watch dl\r\n"),
		do(1, "ignore default\r\n"),
		do(1, "put 0 0 2 1\r\ne\r\n"),
		do(1, "reserve\r\n"),
		do(1, "reserve-with-timeout 5\r\n"),
		do(1, "delete $2\r\n"),
	})
}
