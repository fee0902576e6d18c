package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisFlagHelp documents --redis for every command.
const redisFlagHelp = "Redis to use: redis://[:password@]host:port[/db], or comma-separated host:port addresses of a Redis Cluster (default $REDIS_URL)"

// conn is an open Redis connection and how to describe and close it.
type conn struct {
	rdb   redis.UniversalClient
	desc  string
	close func()
}

// quiet silences go-redis's own logging (pool dial retries and the like):
// the commands report every error they meet themselves.
var quiet sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// connect opens the Redis given by url (or $REDIS_URL). With neither, it
// starts an embedded miniredis when embedded is true and fails otherwise.
func connect(ctx context.Context, url string, embedded bool) (*conn, error) {
	return connectPool(ctx, url, embedded, 0)
}

// connectPool is connect with at least pool connections per server (0: the
// go-redis default), for commands that hold one per shard.
func connectPool(ctx context.Context, url string, embedded bool, pool int) (*conn, error) {
	quiet.Do(func() { redis.SetLogger(discardLogger{}) })
	if url == "" {
		url = os.Getenv("REDIS_URL")
	}
	if url == "" {
		if !embedded {
			return nil, fmt.Errorf("%w: no Redis given: pass --redis redis://host:port or set REDIS_URL", errUsage)
		}
		mr, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("start embedded Redis: %w", err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		return &conn{rdb: rdb, desc: "embedded miniredis at " + mr.Addr(), close: func() { rdb.Close(); mr.Close() }}, nil
	}
	var rdb redis.UniversalClient
	var desc string
	if strings.Contains(url, ",") {
		var addrs []string
		for _, a := range strings.Split(url, ",") {
			a = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(a), "redis://"))
			if a != "" {
				addrs = append(addrs, a)
			}
		}
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: poolSize(0, pool)})
		desc = "Redis Cluster at " + strings.Join(addrs, ",")
	} else {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("%w: --redis %q: %v", errUsage, url, err)
		}
		opt.PoolSize = poolSize(opt.PoolSize, pool)
		rdb = redis.NewClient(opt)
		desc = "Redis at " + opt.Addr
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect to %s: %w", desc, err)
	}
	return &conn{rdb: rdb, desc: desc, close: func() { rdb.Close() }}, nil
}

// poolSize returns the pool size to configure: the one given (0: the go-redis
// default of 10 per CPU), raised to want.
func poolSize(given, want int) int {
	if given == 0 {
		given = 10 * runtime.GOMAXPROCS(0)
	}
	return max(given, want)
}
