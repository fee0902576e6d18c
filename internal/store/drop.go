package store

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// drop.go finds the library's keys by pattern: Drop's, and the sets
// recorded on a server (Sets).

// Drop unlinks every key of the set called name, of shards shards: each
// shard's keys (SCAN with ShardPattern, on every master), then its
// groups' call slots (GroupSlotsPattern), sweeper registry and meta key. It returns how many it deleted.
func Drop(ctx context.Context, rdb redis.UniversalClient, name string, shards int) (int, error) {
	deleted := 0
	for shard := 0; shard < shards; shard++ {
		keys, err := ScanKeys(ctx, rdb, ShardPattern(name, shard))
		if err != nil {
			return deleted, err
		}
		sk := NewKeys(name, shard)
		for _, k := range keys {
			if !sk.Owns(k) {
				continue
			}
			n, err := rdb.Unlink(ctx, k).Result()
			if err != nil {
				return deleted, fmt.Errorf("expset: drop %s: %w", k, err)
			}
			deleted += int(n)
		}
	}
	slots, err := ScanKeys(ctx, rdb, GroupSlotsPattern(name))
	if err != nil {
		return deleted, err
	}
	for _, k := range append(slots, SweepersKey(name), MetaKey(name)) {
		n, err := rdb.Unlink(ctx, k).Result()
		if err != nil {
			return deleted, fmt.Errorf("expset: drop %s: %w", k, err)
		}
		deleted += int(n)
	}
	return deleted, nil
}

// Sets returns the names of the sets recorded on rdb (their meta keys), on
// every master of a cluster, in the order found. It scans the whole
// keyspace once.
func Sets(ctx context.Context, rdb redis.UniversalClient) ([]string, error) {
	keys, err := ScanKeys(ctx, rdb, MetaPattern)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, k := range keys {
		if name, ok := NameOfMeta(k); ok && !strings.ContainsAny(name, "{}") {
			names = append(names, name)
		}
	}
	return names, nil
}

// ScanKeys returns the keys matching pattern: on a cluster, of every
// master.
func ScanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
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
