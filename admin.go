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

// Configuration is what the first Open of a set recorded in Redis.
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
	v, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return Configuration{}, fmt.Errorf("%w: no set %q (%s is missing)", ErrNotFound, name, key)
	}
	if err != nil {
		return Configuration{}, fmt.Errorf("expset: read %s: %w", key, err)
	}
	return parseConfiguration(key, v)
}

func parseConfiguration(key, v string) (Configuration, error) {
	var c Configuration
	f := strings.Fields(v)
	if len(f) != 5 || f[0] != "v1" {
		return c, fmt.Errorf("%w: %s holds %q", ErrUnexpectedReply, key, v)
	}
	for _, kv := range f[1:] {
		k, val, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(val)
		if err != nil {
			return c, fmt.Errorf("%w: %s holds %q", ErrUnexpectedReply, key, v)
		}
		switch k {
		case "shards":
			c.Shards = n
		case "events":
			c.Events = n == 1
		case "payloads":
			c.Payloads = n == 1
		case "index":
			c.Index = n == 1
		default:
			return c, fmt.Errorf("%w: %s holds %q", ErrUnexpectedReply, key, v)
		}
	}
	if c.Shards < 1 || c.Shards > MaxShards {
		return c, fmt.Errorf("%w: %s holds %q", ErrUnexpectedReply, key, v)
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
		out += ", WithPayloads()"
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
		opts = append(opts, WithPayloads())
	}
	if c.Index && !c.Events {
		opts = append(opts, WithSweepIndex())
	}
	return opts
}

// OpenExisting opens a set with the configuration its first Open recorded,
// or fails with an error matching ErrNotFound when no set of that name exists.
func OpenExisting(ctx context.Context, rdb redis.UniversalClient, name string, opts ...Option) (*Set, error) {
	cfg, err := ReadConfiguration(ctx, rdb, name)
	if err != nil {
		return nil, err
	}
	return Open(ctx, rdb, name, append(cfg.Options(), opts...)...)
}
