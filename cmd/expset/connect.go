package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisFlagHelp documents --redis for every command.
const redisFlagHelp = "Redis to use: redis://[user:password@]host:port[/db] (or host:port), a cluster as redis://host:port?addr=host2:port2 or comma-separated host:port (default $REDIS_URL)"

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

// connect opens the Redis given by --redis (or $REDIS_URL). With neither, it
// starts an embedded miniredis when embedded is true and fails otherwise.
func (a *app) connect(ctx context.Context, embedded bool) (*conn, error) {
	return a.connectPool(ctx, embedded, 0)
}

// connectPool is connect with at least pool connections per server (0: the
// go-redis default), for commands that hold one per shard.
func (a *app) connectPool(ctx context.Context, embedded bool, pool int) (*conn, error) {
	quiet.Do(func() { redis.SetLogger(discardLogger{}) })
	raw := a.redis
	if raw == "" {
		raw = os.Getenv("REDIS_URL")
	}
	if raw == "" {
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
	u, cluster, err := redisURL(raw)
	if err != nil {
		return nil, err
	}
	var rdb redis.UniversalClient
	var desc string
	if cluster || a.cluster {
		opt, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("%w: --redis %q: %v; want redis://host:port?addr=host2:port2", errUsage, raw, err)
		}
		opt.PoolSize = poolSize(opt.PoolSize, pool)
		rdb = redis.NewClusterClient(opt)
		desc = "Redis Cluster at " + strings.Join(opt.Addrs, ",")
	} else {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("%w: --redis %q: %v; want redis://[user:password@]host:port[/db]", errUsage, raw, err)
		}
		opt.PoolSize = poolSize(opt.PoolSize, pool)
		rdb = redis.NewClient(opt)
		desc = "Redis at " + opt.Addr
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect to %s: %w", desc, err)
	}
	if c, ok := rdb.(*redis.Client); ok {
		if err := clusterNode(ctx, c, u); err != nil {
			rdb.Close()
			return nil, err
		}
	}
	return &conn{rdb: rdb, desc: desc, close: func() { rdb.Close() }}, nil
}

// redisURL turns what --redis holds into a URL for go-redis's parsers, and
// says whether it names a cluster: a URL with addr= parameters (the form of
// redis.ParseClusterURL), or several comma-separated addresses, which become
// that form. host:port alone means redis://host:port.
func redisURL(raw string) (u string, cluster bool, err error) {
	raw = strings.TrimSpace(raw)
	if strings.Contains(raw, ",") {
		var hosts []string
		for _, a := range strings.Split(raw, ",") {
			a = strings.TrimSpace(a)
			if _, rest, ok := strings.Cut(a, "://"); ok {
				a = rest
			}
			if a == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				return "", false, fmt.Errorf("%w: --redis %q: %q is not host:port; a cluster is host:port,host2:port2 or redis://host:port?addr=host2:port2", errUsage, raw, a)
			}
			hosts = append(hosts, a)
		}
		if len(hosts) == 0 {
			return "", false, fmt.Errorf("%w: --redis %q names no address", errUsage, raw)
		}
		q := url.Values{"addr": hosts[1:]}
		return (&url.URL{Scheme: "redis", Host: hosts[0], RawQuery: q.Encode()}).String(), true, nil
	}
	if !strings.Contains(raw, "://") {
		if _, _, err := net.SplitHostPort(raw); err != nil {
			return "", false, fmt.Errorf("%w: --redis %q: want redis://host:port (or host:port)", errUsage, raw)
		}
		raw = "redis://" + raw
	}
	p, err := url.Parse(raw)
	if err != nil {
		return "", false, fmt.Errorf("%w: --redis %q: %v; want redis://host:port", errUsage, raw, err)
	}
	if p.Scheme != "redis" && p.Scheme != "rediss" && p.Scheme != "unix" {
		return "", false, fmt.Errorf("%w: --redis %q: scheme %q: want redis://host:port (rediss:// for TLS, unix:///path for a socket)", errUsage, raw, p.Scheme)
	}
	return raw, p.Query().Has("addr"), nil
}

// errClusterNode marks a --redis that names one node of a Redis Cluster.
var errClusterNode = errors.New("a node of a Redis Cluster")

// clusterNode fails with errClusterNode, and the URL to give instead, when
// c is connected to a node with cluster mode on: a plain client would meet
// MOVED replies for most keys. u is the URL c was made from.
func clusterNode(ctx context.Context, c *redis.Client, u string) error {
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil || !strings.Contains(info, "cluster_enabled:1") {
		return nil // not a cluster, or a server without INFO cluster (miniredis)
	}
	return fmt.Errorf("%w: %s is %w: give the cluster form, --redis '%s' (or add --cluster)",
		errUsage, c.Options().Addr, errClusterNode, clusterForm(ctx, c, u))
}

// clusterForm is the cluster URL for the cluster c is a node of: u with the
// other masters as addr= parameters, or with a placeholder when they cannot
// be read.
func clusterForm(ctx context.Context, c *redis.Client, u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "redis://host:port?addr=host2:port2"
	}
	q := p.Query()
	q.Del("addr")
	shards, err := c.ClusterShards(ctx).Result()
	for _, s := range shards {
		for _, n := range s.Nodes {
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			if n.Role == "master" && addr != p.Host && !slices.Contains(q["addr"], addr) {
				q.Add("addr", addr)
			}
		}
	}
	if err != nil || len(q["addr"]) == 0 {
		q.Add("addr", "host2:port2")
	}
	if p.User != nil {
		p.User = url.UserPassword("USER", "PASSWORD")
	}
	p.RawQuery = q.Encode()
	s, _ := url.PathUnescape(p.String())
	return s
}

// hint adds to err what to type instead when Redis answered MOVED: the
// command reached one node of a cluster through a plain client.
func hint(err error) error {
	if err == nil || errors.Is(err, errClusterNode) || !redis.HasErrorPrefix(err, "MOVED ") {
		return err
	}
	return fmt.Errorf("%w: --redis names one node of a Redis Cluster: give the cluster form, --redis 'redis://host:port?addr=host2:port2' (or add --cluster)", err)
}

// poolSize returns the pool size to configure: the one given (0: the go-redis
// default of 10 per CPU), raised to want.
func poolSize(given, want int) int {
	if given == 0 {
		given = 10 * runtime.GOMAXPROCS(0)
	}
	return max(given, want)
}
