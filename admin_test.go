package expset

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset/internal/store"
)

func TestReadConfigurationAndDrop(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(4), WithPayloadStorage())
		other, _ := newTestSet(t, b)
		cfg := must[Configuration](t)(ReadConfiguration(ctx, b.rdb, s.Name()))
		if cfg != (Configuration{Shards: 4, Payloads: true}) {
			t.Fatalf("configuration %+v", cfg)
		}
		if _, err := ReadConfiguration(ctx, b.rdb, "never-opened"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("configuration of an unknown set: %v", err)
		}
		if _, err := ReadConfiguration(ctx, b.rdb, "bad{name}"); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("bad name: %v", err)
		}
		for _, o := range []string{"a", "b", "c", "d", "e"} {
			must[time.Time](t)(s.Add(ctx, o, "m", time.Hour, WithPayload([]byte("p"))))
			must[time.Time](t)(other.Add(ctx, o, "m", time.Hour))
		}
		otherBefore := snapshot(t, b.rdb, other.Name())
		n := must[int](t)(Drop(ctx, b.rdb, s.Name()))
		if n < 11 { // 5 owners + 5 payloads + index(es) + meta
			t.Fatalf("Drop deleted %d keys", n)
		}
		if keys := setKeys(t, b.rdb, s.Name()); len(keys) != 0 {
			t.Fatalf("keys left after Drop: %v", keys)
		}
		if after := snapshot(t, b.rdb, other.Name()); len(after) != len(otherBefore) {
			t.Fatalf("Drop touched another set: %d keys before, %d after", len(otherBefore), len(after))
		}
		if n := must[int](t)(Drop(ctx, b.rdb, s.Name())); n != 0 {
			t.Fatalf("second Drop deleted %d", n)
		}
	})
}

// TestConfigurationIsAHash checks that the recorded configuration reads in
// redis-cli: HGETALL expset:{name}:meta.
func TestConfigurationIsAHash(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithShards(8), WithExpiryEvents())
		got := must[map[string]string](t)(b.rdb.HGetAll(ctx, metaKey(s.Name())).Result())
		want := map[string]string{"version": "1", "shards": "8", "events": "1", "payloads": "0", "index": "1"}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("HGETALL %s = %v, want %v", metaKey(s.Name()), got, want)
		}
	})
}

// TestOpenUnreadableConfiguration checks that a meta key this version cannot
// read fails Open and ReadConfiguration with errUnexpectedReply (or the
// server's WRONGTYPE for a key of another type), and is left alone.
func TestOpenUnreadableConfiguration(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		for _, c := range []struct {
			name  string
			write func(key string) error
			want  error
		}{
			{"string", func(k string) error { return b.rdb.Set(ctx, k, "v1 shards=16 events=0 payloads=0 index=0", 0).Err() }, nil},
			{"hash of another version", func(k string) error {
				return b.rdb.HSet(ctx, k, "version", "2", "shards", "4", "events", "0", "payloads", "0", "index", "0").Err()
			}, errUnexpectedReply},
			{"hash with an unknown field", func(k string) error {
				return b.rdb.HSet(ctx, k, "version", "1", "shards", "4", "events", "0", "payloads", "0", "index", "0", "codec", "x").Err()
			}, errUnexpectedReply},
			{"hash with 0 shards", func(k string) error {
				return b.rdb.HSet(ctx, k, "version", "1", "shards", "0", "events", "0", "payloads", "0", "index", "0").Err()
			}, errUnexpectedReply},
			{"hash with events=2", func(k string) error {
				return b.rdb.HSet(ctx, k, "version", "1", "shards", "4", "events", "2", "payloads", "0", "index", "0").Err()
			}, errUnexpectedReply},
			{"list", func(k string) error { return b.rdb.RPush(ctx, k, "x").Err() }, nil},
		} {
			name := uniqueName(t, b.rdb)
			key := metaKey(name)
			if err := c.write(key); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, b.rdb, name)
			_, oerr := Open(ctx, b.rdb, name, WithShards(4))
			_, rerr := ReadConfiguration(ctx, b.rdb, name)
			for _, err := range []error{oerr, rerr} {
				if c.want != nil && !errors.Is(err, c.want) || c.want == nil && (err == nil || !strings.Contains(err.Error(), "WRONGTYPE")) {
					t.Errorf("%s: %v, want %v", c.name, err, c.want)
				}
			}
			if after := snapshot(t, b.rdb, name); !reflect.DeepEqual(before, after) {
				t.Errorf("%s: Open changed %s: %v, then %v", c.name, key, before, after)
			}
		}
	})
}

// TestDropTouchesOnlyItsOwnSet drops sets whose names extend one another
// ("a", "a:1", "a:1:2"): the key pattern of "a"'s shard 1,
// expset:{a:1}:*, also matches "a:1"'s recorded configuration, and Drop
// must leave it, and every other key of the neighbours, alone.
func TestDropTouchesOnlyItsOwnSet(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		base := uniqueName(t, b.rdb) // its cleanup covers base:1 and base:1:2 too
		names := []string{base, base + ":1", base + ":1:2"}
		for _, n := range names {
			s := must[*Set](t)(Open(context.Background(), b.rdb, n, WithExpiryEvents(), WithPayloadStorage()))
			for _, o := range []string{"a", "b", "c", "d", "e", "f"} {
				must[time.Time](t)(s.Add(ctx, o, "m", time.Hour, WithPayload([]byte("p"))))
			}
		}
		for i, n := range names {
			var before []map[string]string
			for _, other := range names[i+1:] {
				before = append(before, ownKeys(t, b, other))
			}
			if got := must[int](t)(Drop(ctx, b.rdb, n)); got == 0 {
				t.Fatalf("Drop(%q) deleted nothing", n)
			}
			if keys := ownKeys(t, b, n); len(keys) != 0 {
				t.Fatalf("keys of %q left after its Drop: %v", n, keys)
			}
			for j, other := range names[i+1:] {
				if after := ownKeys(t, b, other); !reflect.DeepEqual(after, before[j]) {
					t.Fatalf("Drop(%q) changed %q:\nbefore %v\nafter  %v", n, other, before[j], after)
				}
				if _, err := ReadConfiguration(ctx, b.rdb, other); err != nil {
					t.Fatalf("after Drop(%q), the configuration of %q: %v", n, other, err)
				}
				if _, err := Open(context.Background(), b.rdb, other, WithShards(8)); !errors.Is(err, ErrConfigMismatch) {
					t.Fatalf("after Drop(%q), Open(context.Background(), %q, WithShards(8)): %v, want ErrConfigMismatch", n, other, err)
				}
			}
		}
	})
}

// ownKeys snapshots the keys of the set called name and no other: the shard
// keys expset:{name:S}:... for the shard numbers S it records, and its meta
// key.
func ownKeys(t *testing.T, b backend, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	prefix := store.KeyPrefix + "{" + name + ":"
	for k, v := range snapshot(t, b.rdb, name) {
		rest, ok := strings.CutPrefix(k, prefix)
		if k == metaKey(name) {
			out[k] = v
			continue
		}
		if strings.HasSuffix(k, "}:meta") {
			continue // the meta key of "name:S"
		}
		shard, _, _ := strings.Cut(rest, "}")
		if _, err := strconv.Atoi(shard); ok && err == nil {
			out[k] = v
		}
	}
	return out
}

// TestShardKeysOwned checks that Drop's filter knows every key of a shard
// (each field of shardKeys, found by reflection so that a key added later
// is covered) and not the meta key of the set named "name:S".
func TestShardKeysOwned(t *testing.T) {
	t.Parallel()
	sk := newShardKeys("a", 1)
	v := reflect.ValueOf(sk)
	for i := range v.NumField() {
		if v.Field(i).Kind() != reflect.String {
			continue // shard: the index, not a key
		}
		if k := v.Field(i).String(); !sk.Owns(k) || !sk.Owns(k+"owner") && strings.HasSuffix(k, ":") {
			t.Errorf("shardKeys.%s (%s) is not owned", v.Type().Field(i).Name, k)
		}
	}
	for _, k := range []string{metaKey("a:1"), "expset:{a:1}:other", "expset:{a:10}:due", "expset:{a:1:2}:due"} {
		if sk.Owns(k) {
			t.Errorf("%s is owned by shard 1 of a", k)
		}
	}
}

// TestOpenRecordedMissingSet: WithRecordedConfiguration on a name with no
// recorded configuration fails with ErrNotFound and records nothing.
func TestOpenRecordedMissingSet(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		name := uniqueName(t, b.rdb)
		if _, err := Open(ctx, b.rdb, name, WithRecordedConfiguration()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Open of an unrecorded set: %v, want ErrNotFound", err)
		}
		if n := b.rdb.Exists(ctx, metaKey(name)).Val(); n != 0 {
			t.Fatalf("Open of an unrecorded set wrote its configuration")
		}
	})
}
