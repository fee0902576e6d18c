package store

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// open.go serves open.lua: Open's record of a set's configuration in its
// meta key; and reads that record (ReadConfig).

// Config is a set's configuration as its meta key records it, in the
// fields of expset.Configuration.
type Config struct {
	Shards   int
	Events   bool
	Payloads bool
	Index    bool
}

// MaxShards is the most shards a set may have: Redis Cluster's slot count.
const MaxShards = 16384

// metaVersion is the version of the meta key's fields.
const metaVersion = "1"

// Fields returns c as the meta key's fields and values.
func (c Config) Fields() []any {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	return []any{"version", metaVersion, "shards", strconv.Itoa(c.Shards), "events", b(c.Events), "payloads", b(c.Payloads), "index", b(c.Index)}
}

// readOpen reads open.lua's reply from key: the recorded configuration as
// field, value, ...
func readOpen(key string, v any) (Config, error) {
	xs, ok := v.([]any)
	if !ok || len(xs)%2 != 0 {
		return Config{}, fmt.Errorf("%w: open.lua on %s answered %v", ErrUnexpectedReply, key, v)
	}
	fields := make(map[string]string, len(xs)/2)
	for i := 0; i < len(xs); i += 2 {
		k, ok1 := xs[i].(string)
		val, ok2 := xs[i+1].(string)
		if !ok1 || !ok2 {
			return Config{}, fmt.Errorf("%w: open.lua on %s answered %v", ErrUnexpectedReply, key, v)
		}
		fields[k] = val
	}
	return configFields(key, fields)
}

// configFields reads the meta key's fields (of key): version 1, shards 1
// to MaxShards, and events, payloads and index 0 or 1, nothing else.
func configFields(key string, fields map[string]string) (Config, error) {
	var c Config
	n, err := strconv.Atoi(fields["shards"])
	c.Shards = n
	ok := fields["version"] == metaVersion && err == nil && n >= 1 && n <= MaxShards && len(fields) == 5
	for name, dst := range map[string]*bool{"events": &c.Events, "payloads": &c.Payloads, "index": &c.Index} {
		v := fields[name]
		ok = ok && (v == "0" || v == "1")
		*dst = v == "1"
	}
	if !ok {
		return Config{}, fmt.Errorf("%w: %s holds %v, not a configuration of version %s", ErrUnexpectedReply, key, fields, metaVersion)
	}
	return c, nil
}

// Open runs open.lua on the set called name: it records want the first
// time, and returns what is recorded. Open is not reported to OnCall.
func Open(ctx context.Context, rdb redis.Scripter, name string, want Config) (Config, error) {
	key := MetaKey(name)
	v, err := scriptOpen.Run(ctx, rdb, []string{key}, want.Fields()...).Result()
	if err != nil {
		return Config{}, fmt.Errorf("expset: open %q (%s): %w", name, key, err)
	}
	return readOpen(key, v)
}

// AnchorIndexes files IndexAnchor in every shard's due index (ZADD NX, in
// one pipeline): Open does, for a set with expiry events, whose index has
// no TTL.
func (s *Store) AnchorIndexes(ctx context.Context) error {
	pipe := s.rdb.Pipeline()
	for _, sk := range s.shards {
		pipe.ZAddNX(ctx, sk.Due, redis.Z{Score: math.Inf(1), Member: IndexAnchor})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("expset: anchor the due indexes of %q: %w", s.name, err)
	}
	return nil
}

// ReadConfig reads the configuration recorded for the set called name;
// found is false when there is none.
func ReadConfig(ctx context.Context, rdb redis.Cmdable, name string) (c Config, found bool, err error) {
	key := MetaKey(name)
	fields, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return Config{}, false, fmt.Errorf("expset: read %s: %w", key, err)
	}
	if len(fields) == 0 {
		return Config{}, false, nil
	}
	c, err = configFields(key, fields)
	return c, true, err
}
