package expset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/expset/expset/internal/store"
)

// survey looks at each shard not backing off at now: it takes the wake-ups
// come since the last round, makes a missing group, claims what is due (at
// most budget events in all, < 0: a read batch per shard; a shard left
// unclaimed for want of budget is claimed at a later round) and prunes idle
// consumers. It returns the events claimed, the shards to read (woken or
// busy) and those due a safety poll that looks (looking).
func (c *consumer) survey(ctx context.Context, now time.Time, budget int) (todo []delivery, read, visit []int) {
	var woken map[int]int64
	if c.wk != nil {
		woken = c.wk.take()
	}
	for i := range c.shards {
		sh := &c.shards[i]
		d, ok := woken[i]
		if ok {
			sh.busy = true
		}
		switch {
		case ok && d == wakeNow:
			// Events came: some consumer may read them and die with them.
			if !sh.active {
				sh.active = true
				sh.nextClaim = now.Add(c.claimEvery)
			}
		case ok && d == wakeLost:
			// (Re)subscribed: a look now, the pending count with the read,
			// finds what a wake-up lost meanwhile announced.
			sh.nextVisit, sh.looked = now, time.Time{}
		}
		if now.Before(sh.retryAt) {
			continue
		}
		if !sh.grouped {
			if err := c.makeGroups(ctx, i); err != nil {
				c.fail(ctx, i, err)
				continue
			}
			sh.grouped = true
		}
		if sh.active && !now.Before(sh.nextClaim) && budget != 0 {
			ds, err := c.claim(ctx, i, budget)
			if err != nil {
				c.fail(ctx, i, err)
				continue
			}
			if budget > 0 {
				budget = max(budget-len(ds), 0)
			}
			todo = append(todo, ds...)
		}
		if !now.Before(sh.nextPrune) {
			if err := c.set.st.Prune(ctx, c.group, i, c.pruneIdle, ""); err != nil {
				c.fail(ctx, i, err)
				continue
			}
			// Each shard every pruneIdle, stretched as the safety poll is
			// beyond 16 shards: the same commands a second whatever the
			// shard count.
			sh.nextPrune = now.Add(safetyEvery(c.pruneIdle, len(c.shards)))
		}
		poll := !now.Before(sh.nextVisit)
		if poll && !looking(now, sh.looked, c.safety, c.wk.up(i)) {
			// The subscription is up: this safety poll passes by.
			sh.nextVisit, poll = nextPoll(sh.grid, now, c.safety), false
		}
		switch {
		case poll:
			visit = append(visit, i)
		case sh.busy:
			read = append(read, i)
		}
	}
	return todo, read, visit
}

// idleWait returns how long an idle consumer waits from now: until the next
// safety poll, claim or prune that is due, unless a wake-up comes first.
func (c *consumer) idleWait(now time.Time) time.Duration {
	next := now.Add(c.safety)
	for i := range c.shards {
		sh := &c.shards[i]
		at := sh.nextVisit
		if sh.active && sh.nextClaim.Before(at) {
			at = sh.nextClaim
		}
		at = minTime(at, sh.nextPrune)
		if sh.retryAt.After(now) {
			at = sh.retryAt
		}
		next = minTime(next, at)
	}
	if len(c.parked.ring) > 0 {
		next = minTime(next, c.parked.at)
	}
	if g := c.gslots; g != nil && !g.full.IsZero() {
		next = minTime(next, g.full.Add(groupWait))
	}
	if !c.paused.IsZero() {
		next = minTime(next, c.paused.Add(parkPoll))
	}
	return max(time.Until(next), time.Millisecond)
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// fail reports err, confined to shard i, and makes the shard back off. A
// missing group (the stream was deleted) is made again at the shard's next
// round.
func (c *consumer) fail(ctx context.Context, i int, err error) {
	if ctx.Err() != nil {
		return
	}
	sh := &c.shards[i]
	if store.IsNoGroup(err) {
		sh.grouped = false
		sh.cursor = "0-0"
		if c.reserving != nil {
			c.reserving.grouped(c.group, i, len(c.shards), false)
		}
	}
	wait := sh.bo.fail()
	sh.retryAt = time.Now().Add(wait)
	c.set.reportError(ctx, "consume", i, err, wait)
}

// read takes up to a batch of new events from each of the shards, and
// from each of visit (the safety poll) also the count of the group's
// entries pending there, in one pipeline. With budget >= 0 it reads at most
// budget events in all (readCounts): a shard left unread stays busy, to be
// read at a later round.
func (c *consumer) read(ctx context.Context, shards, visit []int, budget int) []delivery {
	if len(shards)+len(visit) == 0 {
		return nil
	}
	shards = append(shards, visit...)
	counts := c.readCounts(shards, budget)
	reads := make([]store.ShardRead, len(shards))
	for k, i := range shards {
		reads[k] = store.ShardRead{Shard: i, Count: counts[k], Pending: k >= len(shards)-len(visit)}
	}
	at := time.Now()
	news := c.set.st.ReadNew(ctx, c.group, c.name, reads)
	var out []delivery
	for k, i := range shards {
		sh := &c.shards[i]
		if news[k].Err != nil {
			c.fail(ctx, i, news[k].Err)
			continue
		}
		if reads[k].Pending {
			sh.nextVisit, sh.looked = nextPoll(sh.grid, at, c.safety), at
			if p := news[k].Pending; p > 0 && !sh.active {
				sh.active = true
				sh.nextClaim = at
			} else if p == 0 {
				sh.active = false
			}
		}
		sh.bo.ok()
		if counts[k] == 0 {
			sh.busy = true // not read for want of budget: read it later
			continue
		}
		sh.busy = len(news[k].Entries) > 0
		for _, m := range news[k].Entries {
			out = append(out, delivery{shard: i, id: m.ID, values: m.Values, at: at, new: true})
		}
	}
	return out
}

// claim takes over one batch of shard i's events (at most budget, when >=
// 0) left pending longer than the lease TTL; the script buries those with
// every attempt used, and the rest are returned for delivery.
func (c *consumer) claim(ctx context.Context, i, budget int) ([]delivery, error) {
	sh := &c.shards[i]
	reason := fmt.Sprintf("the last handler call did not finish: its consumer stopped renewing the lease for %v (it died, or lost Redis)", c.cfg.leaseTTL)
	at := time.Now()
	r, err := c.set.st.Claim(ctx, c.args(), store.ClaimArgs{Shard: i, Cursor: sh.cursor, Count: readCount(c.cfg.batch, budget), Reason: reason})
	if err != nil {
		return nil, err
	}
	cursor := r.Cursor
	from := sh.cursor
	sh.cursor = cursor
	sh.nextClaim = time.Now()
	if cursor == "0-0" {
		sh.nextClaim = sh.nextClaim.Add(c.claimEvery)
	}
	sh.nextClaim = c.claimScan(i, from, cursor, at, sh.nextClaim)
	var out []delivery
	for _, e := range r.Entries {
		if e.Buried {
			c.event(ctx, i, e.Used, errors.New(reason), true)
			continue
		}
		out = append(out, delivery{shard: i, id: e.ID, values: e.Values, at: at})
	}
	return out, r.Malformed
}

// anyBusy reports whether a shard not backing off may have events unread.
func (c *consumer) anyBusy() bool {
	now := time.Now()
	for i := range c.shards {
		if sh := &c.shards[i]; sh.busy && !now.Before(sh.retryAt) {
			return true
		}
	}
	return false
}

// readCounts returns how many events to read from each of shards: a read
// batch each (more while reading past owners at their cap: c.passing), or
// with budget >= 0 at most budget in all, a read batch per shard starting
// from c.nextRead, so that every shard gets its turn.
func (c *consumer) readCounts(shards []int, budget int) []int {
	counts := make([]int, len(shards))
	batch := max(c.cfg.batch, c.passing)
	if budget < 0 {
		for k := range counts {
			counts[k] = batch
		}
		return counts
	}
	n := len(c.shards)
	for step := 0; step < n && budget > 0; step++ {
		i := (c.nextRead + step) % n
		for k, s := range shards {
			if s == i && counts[k] == 0 {
				counts[k] = readCount(batch, budget)
				budget -= counts[k]
				c.nextRead = (i + 1) % n
				break
			}
		}
	}
	return counts
}

// readCount is a read batch, or budget when that is less (budget < 0: no
// bound).
func readCount(batch, budget int) int {
	if budget < 0 {
		return batch
	}
	return min(batch, budget)
}
