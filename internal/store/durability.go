package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durability is what WithDurability asks of the set's writes: that Replicas
// replicas acknowledge them, with AOF also the append-only files of the
// master and those replicas, within Timeout. The zero value asks nothing.
type Durability struct {
	Replicas int
	AOF      bool
	Timeout  time.Duration
}

// On reports whether d asks anything.
func (d Durability) On() bool { return d.Timeout > 0 }

// Shortfall says what the acknowledgements that did not come were.
func (d Durability) Shortfall() string {
	what := fmt.Sprintf("%d replicas", d.Replicas)
	if d.AOF {
		what = fmt.Sprintf("the AOF of the master and %d replicas", d.Replicas)
	}
	return fmt.Sprintf("written on the master, but %s did not acknowledge it within %v (WithDurability)", what, d.Timeout)
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
func (d Durability) wait(ctx context.Context, w waitSender) (reached func() bool) {
	if d.AOF {
		c := w.WaitAOF(ctx, 1, d.Replicas, d.Timeout)
		return func() bool {
			n, err := c.Result()
			return err == nil && len(n) == 2 && n[0] >= 1 && n[1] >= int64(d.Replicas)
		}
	}
	c := w.Wait(ctx, d.Replicas, d.Timeout)
	return func() bool {
		n, err := c.Result()
		return err == nil && n >= int64(d.Replicas)
	}
}

// pipelined reports whether the wait fits in srv's pipelines: a pipeline's
// replies are all read within the client's ReadTimeout (0 or less: none),
// and the wait may take timeout.
func (d Durability) pipelined(srv *redis.Client) bool {
	rt := srv.Options().ReadTimeout
	return rt <= 0 || d.Timeout+time.Second <= rt
}

// ServerOf returns a client of the one server that holds key (a cluster's
// master of its slot), or nil when it is not known.
func (s *Store) ServerOf(ctx context.Context, key string) *redis.Client {
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

// runWrite runs one write c as Run does; with WithDurability, on the server
// that holds its first key, with the wait for acknowledgements as RunWrites
// sends it. c.Durable reports whether they came, when wrote(c.Reply) says
// the reply is of a write to keep.
func (s *Store) runWrite(ctx context.Context, c *Call, ahead bool, wrote func(v any) bool) {
	s.RunWrites(ctx, []*Call{c}, ahead, func(c *Call) bool { return wrote(c.Reply) })
}

// RunWrites runs calls as RunPipelined does; with WithDurability, each
// server's calls by runDurable (servers concurrently), with the wait in
// their pipeline when ahead (calls that mostly write), else after them, only
// when one wrote (the sweeper's, which mostly find nothing due and must not
// wait for lagging replicas each time). Each call that
// succeeded and that wrote(call) says wrote has its Durable field report
// whether the acknowledgements came. A call refused because its slot moved
// (a failover, a resharding), or that lost its connection, is run once more
// through the store's client, without a wait.
func (s *Store) RunWrites(ctx context.Context, calls []*Call, ahead bool, wrote func(c *Call) bool) {
	if !s.durable.On() {
		s.RunPipelined(ctx, calls)
		return
	}
	var (
		servers []*redis.Client
		groups  = map[*redis.Client][]*Call{}
		again   []*Call
		mu      sync.Mutex
	)
	for _, c := range calls {
		srv := s.ServerOf(ctx, c.Keys[0])
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
		s.RunPipelined(ctx, again)
	}
}

// runDurable runs calls, all on srv, with the wait for acknowledgements,
// and returns those to run again through the store's client (see
// RunWrites). When ahead and the wait fits in a pipeline
// (Durability.pipelined), the calls go in one pipeline by EVALSHA, the wait
// last: on one connection, so the wait covers every write the calls made.
// Calls whose script srv did not know (NOSCRIPT) ran nothing, and the wait
// counted nothing of theirs: they go again in a second pipeline, by EVAL
// (which loads the script), with a wait of its own. Otherwise the calls run
// by runDurableConn.
func (s *Store) runDurable(ctx context.Context, srv *redis.Client, calls []*Call, ahead bool, wrote func(c *Call) bool) (again []*Call) {
	for eval := false; len(calls) > 0; eval = true {
		pipe, ok := srv.Pipeline().(waitPipeliner)
		if !ok || !ahead || !s.durable.pipelined(srv) {
			return s.runDurableConn(ctx, srv, calls, wrote)
		}
		start := time.Now()
		cmds := make([]*redis.Cmd, len(calls))
		for i, c := range calls {
			if eval {
				cmds[i] = c.Script.Eval(ctx, pipe, c.Keys, c.Args...) // which loads it
			} else {
				cmds[i] = c.Script.EvalSha(ctx, pipe, c.Keys, c.Args...)
			}
		}
		reached := s.durable.wait(ctx, pipe)
		_, _ = pipe.Exec(ctx) // errors are read per command
		took := time.Since(start)
		var noscript, kept []*Call
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
			c.Durable = ok
		}
		calls = noscript
	}
	return again
}

// runDurableConn is runDurable for a wait not sent in the pipeline:
// the calls run as runPipelinedOn runs them, on a connection of their own,
// then, when one wrote, the wait on that connection.
func (s *Store) runDurableConn(ctx context.Context, srv *redis.Client, calls []*Call, wrote func(c *Call) bool) (again []*Call) {
	conn := srv.Conn()
	defer conn.Close()
	s.runPipelinedOn(ctx, conn, calls)
	var kept []*Call
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
			c.Durable = ok
		}
	}
	return again
}

// written sorts a durable write call c that ran: retry when it should run
// again through the store's client (its slot moved, or its connection was
// lost), kept when it succeeded and wrote (wrote), so that the wait counts
// for it.
func written(ctx context.Context, c *Call, wrote func(c *Call) bool) (retry, kept bool) {
	if c.Err != nil {
		return (redirected(c.Err) || !IsRedisError(c.Err)) && ctx.Err() == nil, false
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

// IsRedisError reports whether err is an error reply from the server (the
// command ran and was refused) rather than a failure to reach it.
func IsRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
