package expset

import (
	"context"
	"sync"
	"time"
)

// call makes one handler call of e under a lease: every c.beat until the
// handler returns, begin.lua renews the entry's idle time in the group's
// pending list, if this consumer still holds it. The handler's context ends
// with ctx, when a renewal finds the event held by another consumer or
// acknowledged (cause ErrHandlerLeaseLost), or after WithMaxHandlingTime
// (cause ErrHandlerTimeout). Renewals go on after that, until the handler
// returns: no other consumer takes an event whose handler call is still
// running. A renewal that fails for a Redis error is reported and tried again
// at the next beat.
func (c *consumer) call(ctx context.Context, shard int, id string, e Expiry) error {
	hctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	hctx, cancel := context.WithTimeoutCause(hctx, c.cfg.maxHandling, ErrHandlerTimeout)
	defer cancel()

	var (
		mu      sync.Mutex
		stopped bool
		running sync.WaitGroup
		timer   *time.Timer
	)
	renew := func() {
		defer running.Done()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(c.beat, time.Second))
		v, err := c.set.run(rctx, "renew", shard, scriptBegin, c.leaseKeys(shard), c.group, c.name, id, "t")
		cancel()
		if err != nil {
			c.set.reportError(ctx, "consume", shard, err, c.beat)
		} else if n, _ := asInt64(v); n != 1 {
			lost(ErrHandlerLeaseLost)
		}
		mu.Lock()
		if !stopped {
			running.Add(1)
			timer.Reset(c.beat)
		}
		mu.Unlock()
	}
	mu.Lock()
	running.Add(1)
	timer = time.AfterFunc(c.beat, renew)
	mu.Unlock()

	err := c.handle(hctx, e)

	mu.Lock()
	stopped = true
	if timer.Stop() {
		running.Done() // the renewal scheduled will not run
	}
	mu.Unlock()
	running.Wait()
	return err
}
