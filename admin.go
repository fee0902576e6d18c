package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Configuration is what the first Open of a set recorded in Redis, in the
// hash expset:{name}:meta (HGETALL shows it: version 1, shards, and events,
// payloads and index as 0 or 1). Sets recorded by earlier versions, as a
// string such as "v1 shards=16 events=0 payloads=0 index=0", still open and
// read as they are.
type Configuration struct {
	Shards   int
	Events   bool
	Payloads bool
	Index    bool // the due index is kept (always with Events)
}

// ReadConfiguration returns the configuration recorded for the set called
// name, or an error matching ErrNotFound when no set of that name was opened.
func ReadConfiguration(ctx context.Context, rdb redis.UniversalClient, name string) (Configuration, error) {
	if err := checkClient(rdb); err != nil {
		return Configuration{}, err
	}
	if err := validateName(name); err != nil {
		return Configuration{}, err
	}
	key := metaKey(name)
	fields, err := rdb.HGetAll(ctx, key).Result()
	if redis.HasErrorPrefix(err, "WRONGTYPE") {
		// Recorded by an earlier version, as a string (or a foreign key).
		v, gerr := rdb.Get(ctx, key).Result()
		if gerr != nil {
			return Configuration{}, fmt.Errorf("expset: read %s: %w", key, err)
		}
		return legacyConfiguration(key, v)
	}
	if err != nil {
		return Configuration{}, fmt.Errorf("expset: read %s: %w", key, err)
	}
	if len(fields) == 0 {
		return Configuration{}, fmt.Errorf("%w: no set %q (%s is missing)", ErrNotFound, name, key)
	}
	return configurationFields(key, fields)
}

// metaVersion is the version of the key layout the meta hash records.
const metaVersion = "1"

// fields returns c as the field-value pairs of its meta hash.
func (c Configuration) fields() []any {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	return []any{"version", metaVersion, "shards", strconv.Itoa(c.Shards), "events", b(c.Events), "payloads", b(c.Payloads), "index", b(c.Index)}
}

// text describes c in errors.
func (c Configuration) text() string {
	return fmt.Sprintf("shards=%d events=%t payloads=%t index=%t", c.Shards, c.Events, c.Payloads, c.Index)
}

// recordedConfiguration reads the reply of open.lua: the fields of the meta
// hash, or the string an earlier version recorded.
func recordedConfiguration(key string, v any) (Configuration, error) {
	if s, ok := v.(string); ok {
		return legacyConfiguration(key, s)
	}
	xs, ok := v.([]any)
	if !ok || len(xs)%2 != 0 {
		return Configuration{}, fmt.Errorf("%w: open.lua on %s answered %v", ErrUnexpectedReply, key, v)
	}
	fields := make(map[string]string, len(xs)/2)
	for i := 0; i < len(xs); i += 2 {
		k, ok1 := xs[i].(string)
		val, ok2 := xs[i+1].(string)
		if !ok1 || !ok2 {
			return Configuration{}, fmt.Errorf("%w: open.lua on %s answered %v", ErrUnexpectedReply, key, v)
		}
		fields[k] = val
	}
	return configurationFields(key, fields)
}

// legacyConfiguration reads the string earlier versions recorded, such as
// "v1 shards=16 events=0 payloads=0 index=0".
func legacyConfiguration(key, v string) (Configuration, error) {
	f := strings.Fields(v)
	if len(f) != 5 || f[0] != "v"+metaVersion {
		return Configuration{}, fmt.Errorf("%w: %s holds %q", ErrUnexpectedReply, key, v)
	}
	fields := map[string]string{"version": metaVersion}
	for _, kv := range f[1:] {
		k, val, _ := strings.Cut(kv, "=")
		fields[k] = val
	}
	return configurationFields(key, fields)
}

// configurationFields reads the fields of a meta hash: exactly those that
// Configuration.fields writes, with values it could have written.
func configurationFields(key string, fields map[string]string) (Configuration, error) {
	var c Configuration
	n, err := strconv.Atoi(fields["shards"])
	c.Shards = n
	ok := fields["version"] == metaVersion && err == nil && n >= 1 && n <= maxShards && len(fields) == 5
	for name, dst := range map[string]*bool{"events": &c.Events, "payloads": &c.Payloads, "index": &c.Index} {
		v := fields[name]
		ok = ok && (v == "0" || v == "1")
		*dst = v == "1"
	}
	if !ok {
		return Configuration{}, fmt.Errorf("%w: %s holds %v, not a configuration of version %s", ErrUnexpectedReply, key, fields, metaVersion)
	}
	return c, nil
}

// Drop deletes every key of the set called name: its owners, payloads,
// indexes, event and dead-letter streams, leases and recorded configuration.
// It is meant for tests, demos and retiring a set, not for a set in use: a
// write racing with Drop may survive it. It returns how many keys it deleted.
// It deletes only the set's own keys, whatever its neighbours' names: the
// set "a:1", whose keys the patterns of "a" partly match, is left whole.
func Drop(ctx context.Context, rdb redis.UniversalClient, name string) (int, error) {
	cfg, err := ReadConfiguration(ctx, rdb, name)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	deleted := 0
	for shard := 0; shard < cfg.Shards; shard++ {
		pattern := keyPrefix + "{" + name + ":" + strconv.Itoa(shard) + "}:*"
		keys, err := scanKeys(ctx, rdb, pattern)
		if err != nil {
			return deleted, err
		}
		sk := newShardKeys(name, shard)
		for _, k := range keys {
			if !sk.owns(k) {
				continue
			}
			n, err := rdb.Unlink(ctx, k).Result()
			if err != nil {
				return deleted, fmt.Errorf("expset: drop %s: %w", k, err)
			}
			deleted += int(n)
		}
	}
	n, err := rdb.Unlink(ctx, metaKey(name)).Result()
	if err != nil {
		return deleted, fmt.Errorf("expset: drop %s: %w", metaKey(name), err)
	}
	return deleted + int(n), nil
}

// scanKeys lists the keys matching pattern, on every master of a cluster.
func scanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c redis.Cmdable) ([]string, error) {
		var out []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("expset: scan %s: %w", pattern, err)
		}
		return out, nil
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	var (
		out []string
		mu  sync.Mutex
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := scan(ctx, c)
		mu.Lock()
		out = append(out, keys...)
		mu.Unlock()
		return err
	})
	return out, err
}

// optionsText renders Options as Go source: "WithShards(16),
// WithExpiryEvents()".
func (c Configuration) optionsText() string {
	out := "WithShards(" + strconv.Itoa(c.Shards) + ")"
	if c.Events {
		out += ", WithExpiryEvents()"
	}
	if c.Payloads {
		out += ", WithPayloadStorage()"
	}
	if c.Index && !c.Events {
		out += ", WithSweepIndex()"
	}
	return out
}

// Options returns the options that open a set with this configuration, for
// tools that attach to a set they did not create (see ReadConfiguration).
func (c Configuration) Options() []Option {
	opts := []Option{WithShards(c.Shards)}
	if c.Events {
		opts = append(opts, WithExpiryEvents())
	}
	if c.Payloads {
		opts = append(opts, WithPayloadStorage())
	}
	if c.Index && !c.Events {
		opts = append(opts, WithSweepIndex())
	}
	return opts
}
