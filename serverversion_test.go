package expset

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// allScripts are every script expset runs, to check that none ran.
var allScripts = store.All()

// assertNoScriptRan fails t when any of expset's scripts is in the script
// cache of c (EVALSHA falls back to EVAL, which caches the script) or any key
// was written.
func assertNoScriptRan(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	shas := make([]string, len(allScripts))
	for i, sc := range allScripts {
		shas[i] = sc.Hash()
	}
	exists, err := c.ScriptExists(ctx, shas...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range exists {
		if e {
			t.Errorf("script %s ran on the refused server", shas[i])
		}
	}
	if n := c.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys written on the refused server", n)
	}
}

// TestOpenRefusesOldServer runs on a server older than 7.0 (EXPSET_OLD_REDIS_BIN,
// e.g. Redis 6.2.16): Open, with and without WithRecordedConfiguration, fails with ErrServerVersion
// naming the server's version and the minimum, whatever protocol the client
// speaks, and no script runs.
func TestOpenRefusesOldServer(t *testing.T) {
	old := redistest.StartOld(t)
	ctx := context.Background()
	info, err := redistest.Info(ctx, old.Client(t), "server")
	if err != nil {
		t.Fatal(err)
	}
	version := info["redis_version"]
	t.Logf("old server: redis_version %s", version)
	for _, protocol := range []int{0, 2, 3} {
		c := old.Client(t, func(o *redis.Options) { o.Protocol = protocol })
		opens := map[string]func() error{
			"Open with no options": func() error { _, err := Open(context.Background(), c, "orders"); return err },
			"Open":                 func() error { _, err := Open(ctx, c, "orders", WithExpiryEvents()); return err },
			"WithRecordedConfiguration": func() error {
				if err := c.HSet(ctx, metaKey("orders"), store.Config{Shards: 16}.Fields()...).Err(); err != nil {
					t.Fatal(err)
				}
				defer c.Del(ctx, metaKey("orders"))
				_, err := Open(ctx, c, "orders", WithRecordedConfiguration())
				return err
			},
		}
		for name, open := range opens {
			err := open()
			if !errors.Is(err, ErrServerVersion) {
				t.Fatalf("protocol %d, %s: err = %v; want ErrServerVersion", protocol, name, err)
			}
			for _, want := range []string{"Redis " + version, old.Addr, "Redis 7.0 or later", "Valkey 7.2 or later", "PEXPIRE"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("protocol %d, %s: %q does not say %q", protocol, name, err, want)
				}
			}
		}
		assertNoScriptRan(t, c)
	}
}

// TestOpenRefusesClusterWithOldMaster runs on a cluster whose third master is
// older than 7.0 (EXPSET_OLD_REDIS_BIN) and the others current: Open checks
// every master, so it fails naming the old one, though the set's meta key
// lives on another.
func TestOpenRefusesClusterWithOldMaster(t *testing.T) {
	oldBin, err := redistest.OldBinary()
	if err != nil {
		redistest.StartOld(t) // skips, saying how to set EXPSET_OLD_REDIS_BIN
	}
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Binaries: []string{"", "", oldBin}, NodeTimeout: 5 * time.Second})
	var oldNode *redistest.Node
	for _, n := range cl.Nodes() {
		if n.Server.Addr == cl.Addrs()[2] {
			oldNode = n
		}
	}
	if oldNode == nil || oldNode.Role != redistest.RoleMaster {
		t.Fatalf("the old node %s is not a master: %+v", cl.Addrs()[2], oldNode)
	}
	c := cl.Client(t)
	name := "orders"
	if redistest.KeySlot(metaKey(name)) >= oldNode.Slots[0][0] {
		t.Fatalf("test premise: %s must not live on the old master (slots %v)", metaKey(name), oldNode.Slots)
	}
	_, err = Open(context.Background(), c, name)
	if !errors.Is(err, ErrServerVersion) || !strings.Contains(err.Error(), oldNode.Addr) {
		t.Fatalf("Open on a cluster with an old master: %v; want ErrServerVersion naming %s", err, oldNode.Addr)
	}
	t.Log(err)
}

// TestOpenChecksServerOnce: Open reads the version (one HELLO), and the
// Set's calls never read it again.
func TestOpenChecksServerOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.PoolSize = 1 }) // one connection: its set-up HELLO happens once
	ctx := context.Background()
	hellos := func() int64 {
		t.Helper()
		n, _, err := redistest.CommandStats(ctx, c, "hello")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := hellos()
	s, err := Open(ctx, c, "orders", WithExpiryEvents())
	if err != nil {
		t.Fatal(err)
	}
	afterOpen := hellos()
	if afterOpen != before+1 {
		t.Fatalf("Open sent %d HELLOs; want 1", afterOpen-before)
	}
	for i := 0; i < 10; i++ {
		if _, err := s.Add(ctx, "u", "m", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Count(ctx, "u"); err != nil {
			t.Fatal(err)
		}
	}
	if n := hellos(); n != afterOpen {
		t.Fatalf("20 calls after Open sent %d HELLOs; want none", n-afterOpen)
	}
	if n, _, _ := redistest.CommandStats(ctx, c, "info"); n != 4 {
		t.Fatalf("INFO ran %d times; want 4 (this test's own reads, and Open's one read of the eviction policy): Open should not need it for the version when HELLO answers", n)
	}
}

// TestOpenReadsVersionUnderACLs: a user denied INFO and every @dangerous
// command, as managed services often configure, still opens sets: HELLO
// answers (Redis lets every user run it: "-hello" in an ACL has no effect).
// Where neither answers, the version is unknown and Open goes on.
func TestOpenReadsVersionUnderACLs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-@dangerous", "-info", "-hello").Err(); err != nil {
		t.Fatal(err)
	}
	for _, protocol := range []int{2, 3} {
		c := srv.Client(t, func(o *redis.Options) { o.Username, o.Password, o.Protocol = "app", "pw", protocol })
		if err := c.Info(ctx, "server").Err(); err == nil || !redis.HasErrorPrefix(err, "NOPERM") {
			t.Fatalf("test premise: INFO as app: %v; want NOPERM", err)
		}
		v, err := readServerVersion(ctx, c, protocol)
		if err != nil || v.via != "HELLO" || v.version == "unknown" {
			t.Fatalf("protocol %d: read %+v, %v; want the version from HELLO", protocol, v, err)
		}
		if _, err := Open(ctx, c, "orders"); err != nil {
			t.Fatalf("protocol %d: Open: %v", protocol, err)
		}
		// A client of unknown kind is asked INFO only, which app may not run.
		v, err = readServerVersion(ctx, c, -1)
		if err != nil || v.version != "unknown" || v.tooOld() {
			t.Fatalf("INFO denied: read %+v, %v; want an unknown version that is not judged too old", v, err)
		}
	}
}

func TestServerVersionParsing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    serverVersion
		old  bool
		name string
	}{
		{serverVersion{product: "Redis", version: "6.2.16"}, true, "Redis 6.2.16"},
		{serverVersion{product: "Redis", version: "6.0.20"}, true, "Redis 6.0.20"},
		{serverVersion{product: "Redis", version: "5.0"}, true, "Redis 5.0"},
		{serverVersion{product: "Redis", version: "7.0.0"}, false, "Redis 7.0.0"},
		{serverVersion{product: "Redis", version: "7.0"}, false, "Redis 7.0"},
		{serverVersion{product: "Redis", version: "7.4.1"}, false, "Redis 7.4.1"},
		{serverVersion{product: "Redis", version: "255.255.255"}, false, "Redis 255.255.255"}, // unstable builds
		{serverVersion{product: "Valkey", version: "8.0.1"}, false, "Valkey 8.0.1"},
		{serverVersion{product: "Valkey", version: "7.2.4"}, false, "Valkey 7.2.4"},
		{serverVersion{product: "Valkey", version: "7.0.0"}, true, "Valkey 7.0.0"},
		{serverVersion{product: "miniredis", version: "8.4.0"}, false, "miniredis 8.4.0"},
		{serverVersion{product: "Redis", version: "unknown"}, false, "Redis unknown"},
		{serverVersion{product: "Redis", version: "7.x"}, false, "Redis 7.x"},
	} {
		if got := tc.v.tooOld(); got != tc.old {
			t.Errorf("%s: tooOld = %v; want %v", tc.v, got, tc.old)
		}
		if tc.v.String() != tc.name {
			t.Errorf("String = %q; want %q", tc.v.String(), tc.name)
		}
	}

	resp3 := map[any]any{"server": "valkey", "version": "8.0.1", "proto": int64(3)}
	resp2 := []any{"server", "redis", "version", "6.2.16", "proto", int64(2)}
	for _, tc := range []struct {
		reply any
		want  string
	}{{resp3, "Valkey 8.0.1"}, {resp2, "Redis 6.2.16"}} {
		v, ok := helloVersion(tc.reply)
		if !ok || v.String() != tc.want || v.via != "HELLO" {
			t.Errorf("helloVersion(%v) = %+v, %v; want %s", tc.reply, v, ok, tc.want)
		}
	}
	if v, ok := helloVersion([]any{"server", "redis"}); ok {
		t.Errorf("helloVersion without a version = %+v, true", v)
	}

	valkey := "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\nredis_mode:standalone\r\n"
	if v := infoVersion(valkey); v.String() != "Valkey 8.0.1" || v.tooOld() {
		t.Errorf("infoVersion(Valkey 8.0.1) = %+v", v)
	}
	if v := infoVersion("# Server\r\nredis_version:6.2.16\r\n"); v.String() != "Redis 6.2.16" || !v.tooOld() {
		t.Errorf("infoVersion(Redis 6.2.16) = %+v", v)
	}
}

// TestReadServerVersionMatchesInfo runs on whichever server the suite runs
// on (EXPSET_REDIS_BIN): the version HELLO gives, in both protocols, is the
// one INFO server reports (valkey_version on Valkey, which reports
// redis_version 7.2.4 beside it), and the server is not judged too old.
func TestReadServerVersionMatchesInfo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	addr := redistest.Addr(t)
	for _, protocol := range []int{2, 3} {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
		t.Cleanup(func() { _ = c.Close() })
		info, err := redistest.Info(ctx, c, "server")
		if err != nil {
			t.Fatal(err)
		}
		want := "Redis " + info["redis_version"]
		if v := info["valkey_version"]; v != "" {
			want = "Valkey " + v
		}
		for _, p := range []int{protocol, -1} { // -1: INFO only
			v, err := readServerVersion(ctx, c, p)
			if err != nil || v.String() != want || v.tooOld() {
				t.Fatalf("protocol %d, asked as %d: read %+v, %v; want %s, not too old", protocol, p, v, err, want)
			}
		}
		t.Logf("protocol %d: %s", protocol, want)
	}
}

// TestCheckServersEachBackend: the check passes on every backend the suite
// runs on; miniredis, which has no INFO server section, answers HELLO as
// "miniredis" with a version of its own, judged by the Redis minimum.
func TestCheckServersEachBackend(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		if err := checkServers(ctx, b.rdb, "orders"); err != nil {
			t.Fatal(err)
		}
		if b.mr == nil {
			return
		}
		v, err := readServerVersion(ctx, b.rdb.(*redis.Client), 0)
		if err != nil || v.product != "miniredis" || v.via != "HELLO" || v.tooOld() {
			t.Fatalf("miniredis: read %+v, %v; want miniredis's own version from HELLO, not too old", v, err)
		}
		t.Logf("miniredis reports %s", v)
	})
}
