package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
)

// b64 is what --json prints beside a text field whose bytes are not UTF-8.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestBinaryJSONKeepsBytes: owners, members and keys that are not UTF-8
// come out of --json exactly (in a FIELD_base64 beside the text), and
// quoted in the text output, in inspect, events tail and events dead.
func TestBinaryJSONKeepsBytes(t *testing.T) {
	t.Parallel()
	url, rdb, set := seeded(t, expset.WithShards(2), expset.WithExpiryEvents())
	ctx := context.Background()
	const owner, member, live = "user-\xff\xfe", "order-\xc3(", "live-\x80"
	if _, err := set.Add(ctx, owner, live, time.Hour); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	old, err := expset.Open(ctx, rdb, set.Name(), expset.WithRecordedConfiguration(), expset.WithClock(func() time.Time { return past }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Add(ctx, owner, member, time.Minute); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runBin(t, "inspect", "--json", "--redis", url, set.Name(), owner)
	if code != 0 {
		t.Fatalf("inspect --json: exit %d: %s", code, errs)
	}
	var rep struct {
		OwnerB64 string `json:"owner_base64"`
		KeyB64   string `json:"key_base64"`
		Members  []struct {
			MemberB64 string `json:"member_base64"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	if rep.OwnerB64 != b64(owner) || rep.KeyB64 != b64(set.OwnerKey(owner)) || len(rep.Members) != 2 ||
		rep.Members[0].MemberB64 != b64(member) || rep.Members[1].MemberB64 != b64(live) {
		t.Errorf("inspect --json lost bytes:\n%s", out)
	}
	code, out, _ = runBin(t, "inspect", "--redis", url, set.Name(), owner)
	if code != 0 || !strings.Contains(out, strconv.Quote(member)) || !strings.Contains(out, strconv.Quote(live)) {
		t.Errorf("inspect does not quote members that are not UTF-8:\n%s", out)
	}

	sweepNow(t, set, 1)
	tail := startBin(t, "events", "tail", "--backlog", "--json", "--redis", url, set.Name())
	var ev struct {
		OwnerB64  string `json:"owner_base64"`
		MemberB64 string `json:"member_base64"`
	}
	if l := tail.line(`"owner"`); json.Unmarshal([]byte(l), &ev) != nil || ev.OwnerB64 != b64(owner) || ev.MemberB64 != b64(member) {
		t.Errorf("events tail --json lost bytes: %s", l)
	}
	if code, _ := tail.interrupt(); code != 0 {
		t.Errorf("tail exit %d", code)
	}

	bury(t, set, 1)
	code, out, errs = runBin(t, "events", "dead", "--json", "--redis", url, set.Name())
	var dead []struct {
		OwnerB64  string `json:"owner_base64"`
		MemberB64 string `json:"member_base64"`
	}
	if err := json.Unmarshal([]byte(out), &dead); code != 0 || err != nil || len(dead) != 1 ||
		dead[0].OwnerB64 != b64(owner) || dead[0].MemberB64 != b64(member) {
		t.Errorf("events dead --json: exit %d, %v, lost bytes:\n%s%s", code, err, out, errs)
	}
}

// TestBinaryMissingSet: a set that is not there is reported as such (exit
// 3), not as the library's "member not found".
func TestBinaryMissingSet(t *testing.T) {
	t.Parallel()
	url := "redis://" + redistest.Addr(t)
	for _, args := range [][]string{
		{"inspect", "no-such-set", "u"},
		{"stats", "no-such-set"},
		{"sweep", "--once", "no-such-set"},
		{"events", "dead", "no-such-set"},
		{"events", "tail", "no-such-set"},
	} {
		code, _, errs := runBin(t, append(args, "--redis", url)...)
		if code != 3 || !strings.Contains(errs, `no set "no-such-set"`) || !strings.Contains(errs, "check NAME") ||
			strings.Contains(errs, "member not found") {
			t.Errorf("expset %q: exit %d, %q; want exit 3 and no set", args, code, errs)
		}
	}
}

// TestBinaryUsageErrorsSayWhatToType: bad input on the command line is a
// usage error (exit 2) whose message says what was wrong and what to type.
func TestBinaryUsageErrorsSayWhatToType(t *testing.T) {
	t.Parallel()
	url, _, set := seeded(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "bad name!", "u"}, "use letters, digits"},
		{[]string{"stats", "bad name!"}, "use letters, digits"},
		{[]string{"stats", "--watch=0s", set.Name()}, "want an interval of 100ms or more, like --watch=2s"},
		{[]string{"inspect", set.Name(), ""}, "OWNER of 0 bytes: want 1 to"},
		{[]string{"stats", "--redis", "localhost", set.Name()}, "want redis://host:port"},
		{[]string{"stats", "--redis", "http://localhost:1", set.Name()}, "want redis://host:port"},
		{[]string{"inspect", set.Name()}, "want NAME OWNER, got 1 arguments: expset inspect"},
	} {
		args := tc.args
		if !slices.Contains(args, "--redis") {
			args = append(args, "--redis", url)
		}
		code, _, errs := runBin(t, args...)
		if code != 2 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "boolean") {
			t.Errorf("expset %q: exit %d, %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestBinaryRedisWithoutScheme: --redis host:port means redis://host:port.
func TestBinaryRedisWithoutScheme(t *testing.T) {
	t.Parallel()
	url, _, set := seeded(t)
	code, out, errs := runBin(t, "stats", "--redis", strings.TrimPrefix(url, "redis://"), set.Name())
	if code != 0 || !strings.Contains(out, "set "+set.Name()+" at ") {
		t.Errorf("--redis without redis://: exit %d, %s%s", code, out, errs)
	}
}

// TestBinaryClusterNode: --redis naming one node of a cluster is detected
// before anything runs, and the message gives the cluster form to type,
// which works; --cluster takes the node as the cluster's seed.
func TestBinaryClusterNode(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	rdb := cluster.Client(t)
	name := "cli-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := expset.Open(context.Background(), rdb, name, expset.WithShards(6)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = expset.Drop(context.Background(), rdb, name) })
	node := "redis://" + cluster.Addrs()[0]

	code, _, errs := runBin(t, "stats", "--redis", node, name)
	_, form, _ := strings.Cut(errs, "--redis '")
	form, _, _ = strings.Cut(form, "'")
	if code != 2 || !strings.Contains(errs, "is a node of a Redis Cluster: give the cluster form") || !strings.Contains(form, "?addr=") {
		t.Fatalf("one cluster node as --redis: exit %d, %q; want exit 2 and the cluster form", code, errs)
	}
	for _, args := range [][]string{{"--redis", form}, {"--redis", node, "--cluster"}} {
		if code, out, errs := runBin(t, append([]string{"stats", name}, args...)...); code != 0 || !strings.Contains(out, "6 shards") {
			t.Errorf("stats %q: exit %d, %s%s", args, code, out, errs)
		}
	}
}

func TestRedisURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, url string
		cluster bool
	}{
		{"redis://h:1/2", "redis://h:1/2", false},
		{"rediss://u:p@h:1", "rediss://u:p@h:1", false},
		{"h:1", "redis://h:1", false},
		{"redis://h:1?addr=h:2&addr=h:3", "redis://h:1?addr=h:2&addr=h:3", true},
		{"h:1, redis://h:2 ,h:3", "redis://h:1?addr=h%3A2&addr=h%3A3", true},
	} {
		u, cluster, err := redisURL(tc.in)
		if err != nil || u != tc.url || cluster != tc.cluster {
			t.Errorf("redisURL(%q) = %q, %v, %v; want %q, %v", tc.in, u, cluster, err, tc.url, tc.cluster)
		}
	}
	for _, in := range []string{"h", "http://h:1", "h:1,h", ","} {
		if _, _, err := redisURL(in); !errors.Is(err, errUsage) {
			t.Errorf("redisURL(%q): %v, want a usage error", in, err)
		}
	}
	if err := hint(movedError("MOVED 5852 127.0.0.1:7001")); !strings.Contains(err.Error(), "give the cluster form") {
		t.Errorf("a MOVED error without a hint: %v", err)
	}
}

// movedError is a Redis error reply, as go-redis returns one.
type movedError string

func (e movedError) Error() string { return string(e) }
func (movedError) RedisError()     {}
