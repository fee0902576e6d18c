package beanstalk

import (
	"context"
	"time"
)

// safetyMargin is the last second of a reserved job's time to run, in which
// a reserve answers DEADLINE_SOON rather than wait (as beanstalkd does).
const safetyMargin = time.Second

// soonest returns the earliest deadline of the jobs the connection holds
// (zero: none), forgetting those whose time to run has ended.
func (c *conn) soonest(now time.Time) time.Time {
	var t time.Time
	for id, h := range c.held {
		if now.After(h.deadline) {
			delete(c.held, id)
			continue
		}
		if t.IsZero() || h.deadline.Before(t) {
			t = h.deadline
		}
	}
	return t
}

// reserve answers reserve (timeout < 0) and reserve-with-timeout (seconds).
func (c *conn) reserve(ctx context.Context, timeout int64) error {
	c.setWorker()
	now := time.Now()
	soon := c.soonest(now)
	if !soon.IsZero() && !now.Before(soon.Add(-safetyMargin)) {
		// In the safety margin: a ready job is still given, else DEADLINE_SOON.
		tube, j, _, err := c.take(ctx)
		switch {
		case err != nil:
			c.internal("reserve", err)
		case j != nil:
			c.reserved(tube, j)
		default:
			c.reply(msgDeadlineSoon)
		}
		return nil
	}
	var end time.Time
	if timeout >= 0 {
		end = now.Add(time.Duration(timeout) * time.Second)
	}
	if err := c.flush(); err != nil {
		return err
	}
	wake, stop := c.s.wake.subscribe(c.watch)
	defer stop()
	c.waiting(+1)
	defer c.waiting(-1)
	var probe *hangupProbe
	defer func() {
		if probe != nil {
			probe.stop(c)
		}
	}()
	failing := false
	for {
		tube, j, next, err := c.take(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !failing {
				c.s.cfg.Logf("beanstalkd: reserve (retrying): %v", err)
			}
			failing = true
			next = -1
		} else {
			if failing {
				c.s.cfg.Logf("beanstalkd: reserve: Redis answers again")
			}
			failing = false
		}
		if j != nil {
			c.reserved(tube, j)
			return nil
		}
		now = time.Now()
		if timeout >= 0 && !now.Before(end) {
			c.reply(msgTimedOut)
			return nil
		}
		if !soon.IsZero() && !now.Before(soon.Add(-safetyMargin)) {
			c.reply(msgDeadlineSoon)
			return nil
		}
		at := now.Add(c.s.cfg.Poll)
		if next >= 0 {
			at = minTime(at, now.Add(time.Duration(next)*time.Millisecond))
		}
		if timeout >= 0 {
			at = minTime(at, end)
		}
		if !soon.IsZero() {
			at = minTime(at, soon.Add(-safetyMargin))
		}
		if probe == nil && c.eof == nil {
			probe = startProbe(c)
		}
		var hungup <-chan struct{}
		if probe != nil {
			hungup = probe.hungup
		}
		timer := time.NewTimer(time.Until(at))
		select {
		case <-wake:
		case <-timer.C:
		case <-hungup:
			timer.Stop()
			// beanstalkd answers a half-closed client's reserve TIMED_OUT.
			c.reply(msgTimedOut)
			return nil
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		timer.Stop()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (c *conn) waiting(d int) {
	c.s.mu.Lock()
	c.s.waiting += d
	for _, t := range c.watch {
		c.s.ref(t).waiting += d
		c.s.unref(t)
	}
	c.s.mu.Unlock()
}

// take reserves the most urgent ready job of the watched tubes (lowest
// priority, then lowest ID), if there is one; else it returns how long until
// one of them next changes by itself (-1: never).
func (c *conn) take(ctx context.Context) (string, *Job, int64, error) {
	st := c.s.store
	if len(c.watch) == 1 {
		j, next, err := st.Reserve(ctx, c.watch[0], c.token, 0)
		return c.watch[0], j, next, err
	}
	for range 10 {
		best, next := "", int64(-1)
		var bestID uint64
		var bestPri uint32
		for _, t := range c.watch {
			id, pri, ok, n, err := st.Head(ctx, t)
			if err != nil {
				return "", nil, 0, err
			}
			if !ok {
				if n >= 0 && (next < 0 || n < next) {
					next = n
				}
				continue
			}
			if best == "" || pri < bestPri || (pri == bestPri && id < bestID) {
				best, bestID, bestPri = t, id, pri
			}
		}
		if best == "" {
			return "", nil, next, nil
		}
		j, _, err := st.Reserve(ctx, best, c.token, bestID)
		if err != nil || j != nil {
			return best, j, 0, err
		}
		// Another client took it first: look again.
	}
	return "", nil, 0, nil
}

// hangupProbe reads while a reserve waits, to notice a client that closes
// its side (beanstalkd answers its reserve TIMED_OUT). What it reads joins
// the connection's input.
type hangupProbe struct {
	done   chan struct{}
	hungup chan struct{}
	buf    []byte
	err    error
}

func startProbe(c *conn) *hangupProbe {
	p := &hangupProbe{done: make(chan struct{}), hungup: make(chan struct{})}
	go func() {
		defer close(p.done)
		var b [4096]byte
		n, err := c.nc.Read(b[:])
		p.buf, p.err = b[:n], err
		if n == 0 && err != nil && !isTimeout(err) {
			close(p.hungup)
		}
	}()
	return p
}

// stop ends the probe and keeps what it read.
func (p *hangupProbe) stop(c *conn) {
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	<-p.done
	_ = c.nc.SetReadDeadline(time.Time{})
	c.in = append(c.in, p.buf...)
	if p.err != nil && !isTimeout(p.err) {
		c.eof = p.err
	}
}

func isTimeout(err error) bool {
	type timeout interface{ Timeout() bool }
	t, ok := err.(timeout)
	return ok && t.Timeout()
}
