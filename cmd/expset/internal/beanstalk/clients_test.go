package beanstalk

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gobeanstalk "github.com/beanstalkd/go-beanstalk"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestGoBeanstalkClient: github.com/beanstalkd/go-beanstalk, unchanged,
// through every kind of command it has.
func TestGoBeanstalkClient(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Parallel()
		addr := startFront(t, rdb, testPrefix(t), Config{})
		c, err := gobeanstalk.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		check := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		tube := gobeanstalk.NewTube(c, "emails")
		id1, err := tube.Put([]byte("late"), 10, 0, time.Minute)
		check("put", err)
		id2, err := tube.Put([]byte("urgent"), 1, 0, time.Minute)
		check("put", err)
		id3, err := tube.Put([]byte("later"), 1, time.Hour, time.Minute)
		check("put", err)
		if id, body, err := tube.PeekReady(); err != nil || id != id2 || string(body) != "urgent" {
			t.Fatalf("peek-ready: %d %q %v", id, body, err)
		}
		if id, _, err := tube.PeekDelayed(); err != nil || id != id3 {
			t.Fatalf("peek-delayed: %d %v", id, err)
		}
		ts := gobeanstalk.NewTubeSet(c, "emails", "default")
		id, body, err := ts.Reserve(time.Second)
		check("reserve", err)
		if id != id2 || string(body) != "urgent" {
			t.Fatalf("reserve: %d %q, want the urgent one", id, body)
		}
		check("touch", c.Touch(id))
		st, err := c.StatsJob(id)
		check("stats-job", err)
		if st["state"] != "reserved" || st["tube"] != "emails" || st["pri"] != "1" || st["reserves"] != "1" {
			t.Fatalf("stats-job: %v", st)
		}
		check("release", c.Release(id, 20, 0))
		id, _, err = ts.Reserve(time.Second)
		check("reserve", err)
		if id != id1 {
			t.Fatalf("after the release to 20, reserve gave %d, want %d", id, id1)
		}
		check("bury", c.Bury(id, 5))
		if bid, _, err := tube.PeekBuried(); err != nil || bid != id1 {
			t.Fatalf("peek-buried: %d %v", bid, err)
		}
		check("kick-job", c.KickJob(id1))
		n, err := tube.Kick(10)
		check("kick", err)
		if n != 1 { // the delayed one
			t.Fatalf("kick: %d, want 1", n)
		}
		body, err = c.Peek(id3)
		check("peek", err)
		if string(body) != "later" {
			t.Fatalf("peek: %q", body)
		}
		body, err = c.ReserveJob(id3)
		check("reserve-job", err)
		if string(body) != "later" {
			t.Fatalf("reserve-job: %q", body)
		}
		check("delete", c.Delete(id3))
		var ce gobeanstalk.ConnError
		if err := c.Delete(id3); !errors.As(err, &ce) || !errors.Is(err, gobeanstalk.ErrNotFound) {
			t.Fatalf("delete again: %v, want not found", err)
		}
		tubes, err := c.ListTubes()
		check("list-tubes", err)
		if strings.Join(tubes, ",") != "default,emails" && strings.Join(tubes, ",") != "emails,default" {
			t.Fatalf("list-tubes: %v", tubes)
		}
		stats, err := c.Stats()
		check("stats", err)
		if stats["current-jobs-ready"] != "2" || stats["total-jobs"] != "3" {
			t.Fatalf("stats: %v", stats)
		}
		tst, err := tube.Stats()
		check("stats-tube", err)
		if tst["current-jobs-ready"] != "2" || tst["name"] != "emails" {
			t.Fatalf("stats-tube: %v", tst)
		}
		check("pause-tube", tube.Pause(time.Hour))
		if _, _, err := ts.Reserve(0); !errors.Is(err, gobeanstalk.ErrTimeout) {
			t.Fatalf("reserve from a paused tube: %v, want a timeout", err)
		}
		if _, err := gobeanstalk.NewTube(c, "emails").Put(make([]byte, DefaultMaxJobSize+1), 0, 0, time.Minute); !errors.Is(err, gobeanstalk.ErrJobTooBig) {
			t.Fatalf("put of a job too big: %v", err)
		}
	})
}

// fivebeans is the npm package (and version) the Node test uses.
const fivebeans = "fivebeans@1.5.0"

// nodeClient returns a directory where require('fivebeans') works, or skips
// the test (fails it when EXPSET_REQUIRE_NODE=1, as CI sets).
func nodeClient(t *testing.T) string {
	t.Helper()
	unavailable := func(why string) {
		t.Helper()
		if os.Getenv("EXPSET_REQUIRE_NODE") == "1" {
			t.Fatalf("node and npm required (EXPSET_REQUIRE_NODE=1): %s", why)
		}
		t.Skipf("skipping the Node client test: %s (apt-get install nodejs npm)", why)
	}
	if _, err := exec.LookPath("node"); err != nil {
		unavailable("node not on PATH")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		unavailable("npm not on PATH")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "expset-npm", strings.ReplaceAll(fivebeans, "@", "-"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "fivebeans", "package.json")); err == nil {
		return dir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", fivebeans).CombinedOutput()
	if err != nil {
		unavailable("npm install " + fivebeans + ": " + err.Error() + ": " + string(out))
	}
	return dir
}

// nodeScript drives the front with fivebeans: use, watch, put, reserve,
// stats-job, release, reserve, bury, kick-job, reserve, delete, and a
// reserve that times out; it prints what it checks.
const nodeScript = `
const fivebeans = require('fivebeans');
const [host, port] = process.argv[2].split(':');
const c = new fivebeans.client(host, Number(port));
// call runs a fivebeans command and resolves to its results (or rejects).
const call = (name, ...args) => new Promise((resolve, reject) =>
  c[name](...args, (err, ...res) => err ? reject(new Error(name + ': ' + err)) : resolve(res)));
c.on('error', (err) => { console.log('FAIL connection: ' + err); process.exit(1); });
c.on('connect', async () => {
  try {
    await call('use', 'node');
    await call('watch', 'node');
    const [id] = await call('put', 7, 0, 60, 'hello from node');
    console.log('put ' + id);
    const [rid, payload] = await call('reserve_with_timeout', 1);
    console.log('reserved ' + rid + ' ' + payload.toString());
    const [st] = await call('stats_job', rid);
    console.log('stats ' + st.state + ' ' + st.tube + ' ' + st.pri);
    await call('release', rid, 3, 0);
    const [rid2] = await call('reserve_with_timeout', 1);
    await call('bury', rid2, 1);
    await call('kick_job', rid2);
    const [rid3] = await call('reserve_with_timeout', 1);
    await call('destroy', rid3);
    await call('reserve_with_timeout', 0).catch((err) => console.log('empty ' + err.message));
    c.end();
    process.exit(0);
  } catch (err) {
    console.log('FAIL ' + err.message);
    process.exit(1);
  }
});
c.connect();
`

// TestNodeClient: the npm client fivebeans, unchanged, against the front.
func TestNodeClient(t *testing.T) {
	t.Parallel()
	dir := nodeClient(t)
	script := filepath.Join(t.TempDir(), "client.js")
	if err := os.WriteFile(script, []byte(nodeScript), 0o644); err != nil {
		t.Fatal(err)
	}
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		t.Parallel()
		addr := startFront(t, rdb, testPrefix(t), Config{})
		cmd := exec.Command("node", script, addr)
		cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		want := "put 1\nreserved 1 hello from node\nstats reserved node 7\nempty reserve_with_timeout: TIMED_OUT\n"
		if string(out) != want {
			t.Fatalf("node printed:\n%s\nwant:\n%s", out, want)
		}
	})
}
