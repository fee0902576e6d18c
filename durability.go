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
// Cost: the wait (WAIT, or WAITAOF with aof) goes in one pipeline with the
// script, to the server that holds the key (on Redis Cluster, the master of
// its slot), so a write takes no more round trips, but its reply comes only
// when the acknowledgements did, or timeout passed; AcquireMany waits once
// per node. The wait goes with every call, also a denial and an Acquire of a
// member already held (Existing), which write nothing: they report Durable
// false, and wait only until the replicas have the connection's earlier
// writes (all of timeout while too few replicas answer). When timeout plus
// one second exceeds the client's
// ReadTimeout, which bounds a pipeline's replies, the wait goes instead on
// the connection that ran the script, after it, only when the script wrote:
// one more round trip. The sweeper waits that way too, after a batch that
// wrote events only.
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

// waitPipeliner is a pipeline that can queue the wait: go-redis's
// *redis.Pipeline, which Client.Pipeline returns.
type waitPipeliner interface {
	redis.Pipeliner
	waitSender
}

// waitSender is what the wait goes through: a pipeline, which queues it
// behind the scripts, or the connection that ran them, which sends it at
// once.
type waitSender interface {
	Wait(ctx context.Context, numSlaves int, timeout time.Duration) *redis.IntCmd
	WaitAOF(ctx context.Context, numLocal, numSlaves int, timeout time.Duration) *redis.IntSliceCmd
}

// wait sends WAIT (or WAITAOF) through w, on the connection that made the
// writes, and returns what reports, once its reply is in, whether every
// acknowledgement asked for came in time.
func (d durability) wait(ctx context.Context, w waitSender) (reached func() bool) {
	if d.aof {
		c := w.WaitAOF(ctx, 1, d.replicas, d.timeout)
		return func() bool {
			n, err := c.Result()
			return err == nil && len(n) == 2 && n[0] >= 1 && n[1] >= int64(d.replicas)
		}
	}
	c := w.Wait(ctx, d.replicas, d.timeout)
	return func() bool {
		n, err := c.Result()
		return err == nil && n >= int64(d.replicas)
	}
}

// pipelined reports whether the wait fits in srv's pipelines: a pipeline's
// replies are all read within the client's ReadTimeout (0 or less: none),
// and the wait may take timeout.
func (d durability) pipelined(srv *redis.Client) bool {
	rt := srv.Options().ReadTimeout
	return rt <= 0 || d.timeout+time.Second <= rt
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

// runWrite runs one write script as Set.run does; with WithDurability, on
// the server that holds keys[0], with the wait for acknowledgements as
// runWrites sends it. durable reports whether they came, when wrote(v) says
// the reply v is of a write to keep.
func (s *Set) runWrite(ctx context.Context, op string, shard int, sc *redis.Script, keys []string, args []any, ahead bool, wrote func(v any) bool) (v any, durable bool, err error) {
	c := &scriptCall{op: op, shard: shard, sc: sc, keys: keys, args: args}
	s.runWrites(ctx, []*scriptCall{c}, ahead, func(c *scriptCall) bool { return wrote(c.v) })
	return c.v, c.durable, c.err
}

// runWrites runs calls as runPipelined does; with WithDurability, each
// server's calls by runDurable (servers concurrently), with the wait in
// their pipeline when ahead (calls that mostly write), else after them, only
// when one wrote (the sweeper's, which mostly find nothing due and must not
// wait for lagging replicas each time). Each call that
// succeeded and that wrote(call) says wrote has its durable field report
// whether the acknowledgements came. A call refused because its slot moved
// (a failover, a resharding), or that lost its connection, is run once more
// through the set's client, without a wait.
func (s *Set) runWrites(ctx context.Context, calls []*scriptCall, ahead bool, wrote func(c *scriptCall) bool) {
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
		if retry := s.runDurable(ctx, srv, groups[srv], ahead, wrote); len(retry) > 0 {
			mu.Lock()
			again = append(again, retry...)
			mu.Unlock()
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

// runDurable runs calls, all on srv, with the wait for acknowledgements,
// and returns those to run again through the set's client (see runWrites).
// When ahead and the wait fits in a pipeline (durability.pipelined), the calls go in
// one pipeline by EVALSHA, the wait last: on one connection, so the wait
// covers every write the calls made. Calls whose script srv did not know
// (NOSCRIPT) ran nothing, and the wait counted nothing of theirs: they go
// again in a second pipeline, by EVAL (which loads the script), with a wait
// of its own. Otherwise the calls run by runDurableConn.
func (s *Set) runDurable(ctx context.Context, srv *redis.Client, calls []*scriptCall, ahead bool, wrote func(c *scriptCall) bool) (again []*scriptCall) {
	for eval := false; len(calls) > 0; eval = true {
		pipe, ok := srv.Pipeline().(waitPipeliner)
		if !ok || !ahead || !s.durable.pipelined(srv) {
			return s.runDurableConn(ctx, srv, calls, wrote)
		}
		start := time.Now()
		cmds := make([]*redis.Cmd, len(calls))
		for i, c := range calls {
			if eval {
				cmds[i] = c.sc.Eval(ctx, pipe, c.keys, c.args...) // which loads it
			} else {
				cmds[i] = c.sc.EvalSha(ctx, pipe, c.keys, c.args...)
			}
		}
		reached := s.durable.wait(ctx, pipe)
		_, _ = pipe.Exec(ctx) // errors are read per command
		took := time.Since(start)
		var noscript, kept []*scriptCall
		for i, c := range calls {
			if !eval && redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				noscript = append(noscript, c)
				continue
			}
			s.settle(ctx, c, cmds[i], took)
			if retry, k := written(ctx, c, wrote); retry {
				again = append(again, c)
			} else if k {
				kept = append(kept, c)
			}
		}
		ok = reached()
		for _, c := range kept {
			c.durable = ok
		}
		calls = noscript
	}
	return again
}

// runDurableConn is runDurable for a wait not sent in the pipeline:
// the calls run as runPipelinedOn runs them, on a connection of their own,
// then, when one wrote, the wait on that connection.
func (s *Set) runDurableConn(ctx context.Context, srv *redis.Client, calls []*scriptCall, wrote func(c *scriptCall) bool) (again []*scriptCall) {
	conn := srv.Conn()
	defer conn.Close()
	s.runPipelinedOn(ctx, conn, calls)
	var kept []*scriptCall
	for _, c := range calls {
		if retry, k := written(ctx, c, wrote); retry {
			again = append(again, c)
		} else if k {
			kept = append(kept, c)
		}
	}
	if len(kept) > 0 {
		ok := s.durable.wait(ctx, conn)()
		for _, c := range kept {
			c.durable = ok
		}
	}
	return again
}

// written sorts a durable write call c that ran: retry when it should run
// again through the set's client (its slot moved, or its connection was
// lost), kept when it succeeded and wrote (wrote), so that the wait counts
// for it.
func written(ctx context.Context, c *scriptCall, wrote func(c *scriptCall) bool) (retry, kept bool) {
	if c.err != nil {
		return (redirected(c.err) || !isRedisError(c.err)) && ctx.Err() == nil, false
	}
	return false, wrote(c)
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
