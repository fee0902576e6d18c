package expset

import "context"

// reserveReadAhead is how many new events a Reserve reads at most when it
// has none read ahead: it begins the first, and the rest wait, uncharged,
// for the next Reserve of the same group and name in the process. A read's
// server cost is mostly finding where the group left off in the stream, so
// a read of ten costs little more than a read of one.
const reserveReadAhead = 10

// aheadQueue is what the Reserve calls of one group and name have read
// and not begun, oldest first, and a consumer of theirs to release them
// with (any of them: they share the consumer name that holds the events).
type aheadQueue struct {
	c  *consumer
	ds []delivery
}

// takeAhead returns the oldest event read ahead for c's group and name,
// if any, removing it.
func (r *reservers) takeAhead(c *consumer) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.ahead[[2]string{c.group, c.name}]
	if q == nil || len(q.ds) == 0 {
		return nil
	}
	d := q.ds[0]
	q.ds = q.ds[1:]
	return []delivery{d}
}

// putAhead adds ds, read by c and not begun, to its group and name's.
func (r *reservers) putAhead(c *consumer, ds []delivery) {
	if len(ds) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ahead == nil {
		r.ahead = map[[2]string]*aheadQueue{}
	}
	k := [2]string{c.group, c.name}
	q := r.ahead[k]
	if q == nil {
		q = &aheadQueue{c: c}
		r.ahead[k] = q
	}
	q.ds = append(q.ds, ds...)
}

// hasAhead reports whether events wait read ahead for c's group and name.
func (r *reservers) hasAhead(c *consumer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.ahead[[2]string{c.group, c.name}]
	return q != nil && len(q.ds) > 0
}

// releaseAhead releases, uncharged, the events read ahead that no Reserve
// began (expire: no call has run for reserveLinger), so that any consumer
// takes them at once. r.mu is not held.
func releaseAhead(qs map[[2]string]*aheadQueue) {
	for _, q := range qs {
		if len(q.ds) > 0 {
			q.c.release(context.Background(), q.ds, nil)
		}
	}
}

// reserveRead reads new events of shards for c (a plain read of at most
// reserveReadAhead) and returns the first, leaving the rest read ahead.
func (c *consumer) reserveRead(ctx context.Context, shards []int) []delivery {
	got := c.read(ctx, shards, nil, reserveReadAhead)
	if len(got) == 0 {
		return nil
	}
	c.reserving.putAhead(c, got[1:])
	return got[:1]
}
