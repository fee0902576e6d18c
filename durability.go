package expset

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The bounds of WithDurability.
const (
	maxDurableReplicas = 1000
	maxDurableTimeout  = time.Minute
)

// WithDurability makes the set's writes wait until replicas replicas (0 to
// 1000) have acknowledged them, and with aof also until the master's
// append-only file and the AOFs of those replicas have them on disk, for at
// most timeout (1ms to 1m), and report whether they did: Decision.Durable
// for Quota.Acquire, AcquireWait and AcquireMany, an error matching
// ErrNotDurable returned beside the deadline for Set.Add,
// SweepStats.NotDurable for the sweeper's expiry events. A write that
// missed them still took effect on the master; a failover before the
// replicas have it loses it. By default nothing waits: Redis replicates
// asynchronously, and an admission the master acknowledged but had not yet
// replicated is lost when a replica takes over (docs/guarantees.md).
//
// Cost: each write that needs it takes one more round trip, which waits up
// to timeout (WAIT, or WAITAOF with aof, sent right after the script on the
// connection that ran it: on Redis Cluster, to the master of the key's slot),
// and holds that connection meanwhile; AcquireMany waits once per node. A
// denial, and an Acquire of a member already held (Existing), write nothing
// and do not wait (Durable false). A sweep waits only after a batch that
// wrote events.
//
// aof needs Redis 7.2 or later (WAITAOF) with appendonly yes on the master:
// Open checks both (ErrServerVersion, ErrNotDurable). replicas 0 with aof
// false asks for nothing and fails with ErrInvalidArgument. The setting is
// not recorded in Redis: each process chooses its own. The client must be
// a *redis.Client, *redis.ClusterClient or *redis.Ring.
func WithDurability(replicas int, aof bool, timeout time.Duration) OpenOption {
	return openOption(func(c *setConfig) error {
		if err := inRange("WithDurability replicas", replicas, 0, maxDurableReplicas); err != nil {
			return err
		}
		if err := inRange("WithDurability timeout", timeout, time.Millisecond, maxDurableTimeout); err != nil {
			return err
		}
		if replicas == 0 && !aof {
			return fmt.Errorf("%w: WithDurability(0, false, %v) asks for no acknowledgement: want replicas 1 or more, or aof", ErrInvalidArgument, timeout)
		}
		c.durable = durability{replicas: replicas, aof: aof, timeout: timeout}
		return nil
	})
}

// durability is what WithDurability asks of the set's writes; the zero
// value asks nothing.
type durability struct {
	replicas int
	aof      bool
	timeout  time.Duration
}

func (d durability) on() bool { return d.timeout > 0 }

// checkDurableClient rejects WithDurability on a client whose servers
// expset cannot reach one by one.
func checkDurableClient(rdb redis.UniversalClient, d durability) error {
	if !d.on() {
		return nil
	}
	switch rdb.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
		return nil
	}
	return fmt.Errorf("%w: WithDurability needs a *redis.Client, *redis.ClusterClient or *redis.Ring, not a %T", ErrInvalidArgument, rdb)
}

// reached sends WAIT (or WAITAOF) on c, the connection that made the
// writes, and reports whether every acknowledgement asked for came in time.
func (d durability) reached(ctx context.Context, c *redis.Conn) bool {
	if d.aof {
		n, err := c.WaitAOF(ctx, 1, d.replicas, d.timeout).Result()
		return err == nil && len(n) == 2 && n[0] >= 1 && n[1] >= int64(d.replicas)
	}
	n, err := c.Wait(ctx, d.replicas, d.timeout).Result()
	return err == nil && n >= int64(d.replicas)
}

// serverOf returns a client of the one server that holds key (a cluster's
// master of its slot), or nil when it is not known.
func (s *Set) serverOf(ctx context.Context, key string) *redis.Client {
	var (
		c   *redis.Client
		err error
	)
	switch r := s.rdb.(type) {
	case *redis.Client:
		c = r
	case *redis.ClusterClient:
		c, err = r.MasterForKey(ctx, key)
	case *redis.Ring:
		c, err = r.GetShardClientForKey(key)
	}
	if err != nil {
		return nil
	}
	return c
}

// runWrite runs one write script as Set.run does; with WithDurability, on a
// connection to the server that holds keys[0], followed, when wrote(v) says
// the reply v is of a write to keep, by the wait for acknowledgements on
// that connection. durable reports whether they came.
func (s *Set) runWrite(ctx context.Context, op string, shard int, sc *redis.Script, keys []string, args []any, wrote func(v any) bool) (v any, durable bool, err error) {
	c := &scriptCall{op: op, shard: shard, sc: sc, keys: keys, args: args}
	s.runWrites(ctx, []*scriptCall{c}, func(c *scriptCall) bool { return wrote(c.v) })
	return c.v, c.durable, c.err
}

// runWrites runs calls as runPipelined does; with WithDurability, each
// server's calls in one pipeline on a connection of their own (servers
// concurrently), followed by one wait for acknowledgements on that
// connection when a call succeeded and wrote(call) says it wrote. Each such
// call's durable field reports whether they came. A call refused because its
// slot moved (a failover, a resharding), or that lost its connection, is
// run once more through the set's client, without a wait.
func (s *Set) runWrites(ctx context.Context, calls []*scriptCall, wrote func(c *scriptCall) bool) {
	if !s.durable.on() {
		s.runPipelined(ctx, calls)
		return
	}
	var (
		servers []*redis.Client
		groups  = map[*redis.Client][]*scriptCall{}
		again   []*scriptCall
		mu      sync.Mutex
	)
	for _, c := range calls {
		srv := s.serverOf(ctx, c.keys[0])
		if srv == nil {
			again = append(again, c)
			continue
		}
		if _, ok := groups[srv]; !ok {
			servers = append(servers, srv)
		}
		groups[srv] = append(groups[srv], c)
	}
	run := func(srv *redis.Client) {
		conn := srv.Conn()
		defer conn.Close()
		cs := groups[srv]
		s.runPipelinedOn(ctx, conn, cs)
		var kept []*scriptCall
		for _, c := range cs {
			switch {
			case c.err != nil && (redirected(c.err) || !isRedisError(c.err)) && ctx.Err() == nil:
				mu.Lock()
				again = append(again, c)
				mu.Unlock()
			case c.err == nil && wrote(c):
				kept = append(kept, c)
			}
		}
		if len(kept) > 0 {
			ok := s.durable.reached(ctx, conn)
			for _, c := range kept {
				c.durable = ok
			}
		}
	}
	if len(servers) == 1 {
		run(servers[0])
	} else {
		var wg sync.WaitGroup
		for _, srv := range servers {
			wg.Add(1)
			go func() { defer wg.Done(); run(srv) }()
		}
		wg.Wait()
	}
	if len(again) > 0 {
		if cc, ok := s.rdb.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
		s.runPipelined(ctx, again)
	}
}

// redirected reports whether a cluster node refused a command because
// another node serves its slot, or the cluster cannot serve it now.
func redirected(err error) bool {
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// acquireWrote reports whether an acquire.lua reply admitted a member anew:
// the one write an Acquire waits to see acknowledged.
func acquireWrote(v any) bool {
	d, err := parseDecision(v, 1)
	return err == nil && d.Allowed && !d.Existing
}

// shortfall says what the acknowledgements that did not come were.
func (d durability) shortfall() string {
	what := fmt.Sprintf("%d replicas", d.replicas)
	if d.aof {
		what = fmt.Sprintf("the AOF of the master and %d replicas", d.replicas)
	}
	return fmt.Sprintf("written on the master, but %s did not acknowledge it within %v (WithDurability)", what, d.timeout)
}
