package expset

import (
	"context"
	"sync"
)

// A Set's own sweeper: Consume and Reserve sweep the set in-process unless
// given WithoutSweeper, so that a process running only consumers delivers
// what falls due. One Sweeper.Run per Set and process serves every consumer
// of it: the first consumer that sweeps starts it, the last one to stop
// stops it (a Consume when it returns, Reserve when its shared state ends,
// reserveLinger after the last call and reservation). It holds a lease in
// the set's sweeper registry like any Sweeper.Run, so consumers and
// sweepers in any number of processes share the shards among them.

// WithoutSweeper makes a Set.Consume or Set.Reserve run no sweeper of its
// own, for deployments that run Sweeper.Run in processes of their own. By
// default (without this option) each consumes and sweeps: a process's
// consumers of a Set share one in-process Sweeper.Run with NewSweeper's
// defaults but a lease TTL of 30s (a process that dies leaves its shards
// to the set's other sweepers 30s after its last renewal, as its events
// to other consumers), started with the first of them and stopped, its
// lease given up, with the last; it takes its share of the shards beside
// every other sweeper of the set, in any process. With this option and no
// sweeper running anywhere, nothing falls due: jobs put with a delay and
// lapsed members wait, and Set.Stats reports their shards Stalled (a job
// put due at once is delivered: Set.Put writes its event). A process that runs
// Sweeper.Run beside consumers without this option holds two leases,
// which only shares the shards one way more.
func WithoutSweeper() DeliveryOption {
	return deliveryOption(func(c *consumeConfig) error { c.noSweep = true; return nil })
}

// ownLeaseTTL is the lease TTL of a Set's in-process sweeper: that of a
// handler call's lease by default, so that a process that dies leaves its
// shards, as its events, to the others after 30s. It renews the lease
// every 10s: four commands, the same whatever the shard count.
const ownLeaseTTL = defaultCallLeaseTTL

// ownSweeper runs a Set's in-process sweeper for its users (see above). The
// zero value is ready to use; it is safe for simultaneous use.
type ownSweeper struct {
	mu    sync.Mutex
	users int
	stop  context.CancelFunc // ends the running Run (nil: none)
	done  chan struct{}      // closed when it has returned
}

// join adds a user of s's sweeper and starts it if it is the first. The
// sweeper's context keeps ctx's values but not its end: it ends when the
// last user leaves.
func (o *ownSweeper) join(ctx context.Context, s *Set) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.users == 0 {
		w, err := NewSweeper(s, WithLeaseTTL(ownLeaseTTL))
		if err != nil {
			return err
		}
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Run returns an error only for misuse, which NewSweeper ruled
			// out; should one come, it is reported, not lost.
			if err := w.Run(rctx); err != nil {
				s.reportError(rctx, "sweep", -1, err, 0)
			}
		}()
		o.stop, o.done = cancel, done
	}
	o.users++
	return nil
}

// leave removes a user; the last one stops the sweeper and waits for its
// Run to return (it gives up its lease first, at most a second).
func (o *ownSweeper) leave() {
	o.mu.Lock()
	o.users--
	if o.users > 0 || o.stop == nil {
		o.mu.Unlock()
		return
	}
	stop, done := o.stop, o.done
	o.stop, o.done = nil, nil
	o.mu.Unlock()
	stop()
	<-done
}
