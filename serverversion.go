package expset

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// The oldest servers expset runs on. Redis 7.0 is the first with PEXPIRE's GT
// option, which the scripts use to stretch a key's TTL without shortening it,
// and with XAUTOCLAIM's three-element reply; the other commands and options
// they use (ZADD LT, ZRANGE BYSCORE LIMIT, ZMSCORE, XAUTOCLAIM) came in 6.2.
// Every Valkey release (7.2 on) implements Redis 7.2. docs/compatibility.md
// has the whole list.
const (
	minRedisVersion  = "7.0.0"
	minValkeyVersion = "7.2.0"
)

// serverVersion is what a server says it is.
type serverVersion struct {
	addr    string // the node, for messages ("" for the client's only server)
	product string // "Redis", "Valkey", or the server's own name
	version string // as reported, e.g. "7.0.15"
	via     string // "HELLO" or "INFO server"
}

func (v serverVersion) String() string { return v.product + " " + v.version }

// minimum returns the oldest version of v's product that expset runs on.
func (v serverVersion) minimum() string {
	if v.product == "Valkey" {
		return minValkeyVersion
	}
	return minRedisVersion
}

// tooOld reports whether v is older than its minimum. A version that does not
// parse is not judged too old: a server that reports one is not known to
// lack anything.
func (v serverVersion) tooOld() bool { return v.olderThan(v.minimum()) }

// parseVersion parses "major.minor.patch" (a missing patch counts as 0).
func parseVersion(s string) ([3]int, bool) {
	var out [3]int
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// checkServers reads the version of every server behind rdb (every master of
// a cluster, every shard of a ring) once, and fails with ErrServerVersion
// naming the first one older than expset supports. It fails with the client's
// error when a server cannot be reached. When a server refuses both HELLO and
// INFO (an ACL that grants neither), its version cannot be known and it
// passes: the scripts then meet Redis's own error on an old server.
func checkServers(ctx context.Context, rdb redis.UniversalClient, name string) error {
	var (
		mu  sync.Mutex
		old []serverVersion
	)
	check := func(ctx context.Context, c versionReader, addr string, protocol int) error {
		v, err := readServerVersion(ctx, c, protocol)
		if err != nil {
			return fmt.Errorf("expset: open %q: reading the server version of %s: %w", name, addrOrDefault(addr), err)
		}
		v.addr = addr
		if v.tooOld() {
			mu.Lock()
			old = append(old, v)
			mu.Unlock()
		}
		return nil
	}
	if err := forEachServer(ctx, rdb, func(ctx context.Context, c redis.UniversalClient, addr string, protocol int) error {
		return check(ctx, c, addr, protocol)
	}); err != nil {
		return err
	}
	if len(old) == 0 {
		return nil
	}
	sort.Slice(old, func(i, j int) bool { return old[i].addr < old[j].addr })
	v := old[0]
	more := ""
	if len(old) > 1 {
		more = fmt.Sprintf(" (and %d more of its nodes)", len(old)-1)
	}
	return fmt.Errorf("%w: cannot open set %q: %s runs %s (read with %s)%s; expset needs Redis %s or later, or Valkey %s or later: "+
		"its scripts use PEXPIRE's GT option, new in Redis 7.0 (see docs/compatibility.md)",
		ErrServerVersion, name, addrOrDefault(v.addr), v, v.via, more, trimPatch(minRedisVersion), trimPatch(minValkeyVersion))
}

func addrOrDefault(addr string) string {
	if addr == "" {
		return "the server"
	}
	return addr
}

// trimPatch turns "7.0.0" into "7.0".
func trimPatch(v string) string { return strings.TrimSuffix(v, ".0") }

// versionReader is the part of a client readServerVersion uses.
type versionReader interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
	Info(ctx context.Context, section ...string) *redis.StringCmd
}

// readServerVersion asks c which server it is: HELLO first (one small reply,
// and in the @connection ACL category that clients need anyway), then INFO
// server (Redis before 6.0 has no HELLO; an ACL may deny it). HELLO is sent
// with the protocol the client already speaks (protocol; 3 when 0, as
// go-redis does), so it leaves the connection as it was; with protocol -1
// (a client of unknown kind) only INFO is asked. It returns an error only
// when the server cannot be reached; a server that answers both with errors
// gives an unknown version.
func readServerVersion(ctx context.Context, c versionReader, protocol int) (serverVersion, error) {
	if protocol == 0 {
		protocol = 3
	}
	if protocol > 0 {
		reply, err := c.Do(ctx, "HELLO", protocol).Result()
		if err == nil {
			if v, ok := helloVersion(reply); ok {
				return v, nil
			}
		} else if !isRedisError(err) {
			return serverVersion{}, err
		}
	}
	txt, err := c.Info(ctx, "server").Result()
	if err != nil {
		if isRedisError(err) {
			return serverVersion{product: "an unknown server", version: "unknown", via: "no HELLO, no INFO"}, nil
		}
		return serverVersion{}, err
	}
	return infoVersion(txt), nil
}

// isRedisError reports whether err is an error reply from the server (the
// command ran and was refused) rather than a failure to reach it.
func isRedisError(err error) bool { return store.IsRedisError(err) }

// helloVersion reads the "server" and "version" fields of a HELLO reply: a
// map in RESP3, a flat list of pairs in RESP2.
func helloVersion(reply any) (serverVersion, bool) {
	fields := map[string]string{}
	put := func(k, v any) {
		ks, ok1 := k.(string)
		vs, ok2 := v.(string)
		if ok1 && ok2 {
			fields[ks] = vs
		}
	}
	switch r := reply.(type) {
	case map[any]any:
		for k, v := range r {
			put(k, v)
		}
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			put(r[i], r[i+1])
		}
	}
	if fields["version"] == "" {
		return serverVersion{}, false
	}
	return serverVersion{product: productName(fields["server"]), version: fields["version"], via: "HELLO"}, true
}

// infoVersion reads INFO server: Valkey reports valkey_version beside the
// redis_version 7.2.4 it implements.
func infoVersion(txt string) serverVersion {
	fields := infoFields(txt)
	if v := fields["valkey_version"]; v != "" {
		return serverVersion{product: "Valkey", version: v, via: "INFO server"}
	}
	if v := fields["redis_version"]; v != "" {
		return serverVersion{product: productName(fields["server_name"]), version: v, via: "INFO server"}
	}
	return serverVersion{product: "an unknown server", version: "unknown", via: "INFO server"}
}

// productName names the product from HELLO's "server" or INFO's server_name.
func productName(server string) string {
	switch strings.ToLower(server) {
	case "", "redis":
		return "Redis"
	case "valkey":
		return "Valkey"
	}
	return server
}
