package expset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// survey looks at each shard not backing off at now: it takes the wake-ups
// come since the last round, makes a missing group, claims what is due (at
// most budget events in all, < 0: a read batch per shard; a shard left
// unclaimed for want of budget is claimed at a later round) and prunes idle
// consumers. It returns the events claimed, the shards to read (woken or
// busy) and those due a safety poll.
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
		if ok && d == wakeNow {
			// Events came: some consumer may read them and die with them.
			if !sh.active {
				sh.active = true
				sh.nextClaim = now.Add(c.claimEvery)
			}
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
			if err := c.prune(ctx, i, c.pruneIdle.Milliseconds(), ""); err != nil {
				c.fail(ctx, i, err)
				continue
			}
			sh.nextPrune = now.Add(max(c.pruneIdle, 4*c.safety))
		}
		switch {
		case !now.Before(sh.nextVisit):
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
	if isNoGroup(err) {
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

// isNoGroup reports whether err is Redis's NOGROUP (the stream or the group
// is gone), also from a script's call (which miniredis reports after a
// prefix of its own).
func isNoGroup(err error) bool {
	var re redis.Error
	return redis.HasErrorPrefix(err, "NOGROUP") || (errors.As(err, &re) && strings.Contains(re.Error(), ": NOGROUP "))
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
	pipe := c.set.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(shards))
	pending := make([]*redis.XPendingCmd, len(visit))
	for k, i := range shards {
		if counts[k] > 0 {
			cmds[k] = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: c.group, Consumer: c.name, Streams: []string{c.set.shards[i].Events, ">"},
				Count: int64(counts[k]), Block: -1,
			})
		}
	}
	for k, i := range visit {
		pending[k] = pipe.XPending(ctx, c.set.shards[i].Events, c.group)
	}
	at := time.Now()
	_, _ = pipe.Exec(ctx) // errors are read per command
	var out []delivery
	for k, i := range shards {
		sh := &c.shards[i]
		var res []redis.XStream
		var err error
		if cmds[k] != nil {
			res, err = cmds[k].Result()
		}
		if errors.Is(err, redis.Nil) {
			err = nil // nothing new
		}
		if v := k - (len(shards) - len(visit)); v >= 0 && err == nil {
			var p *redis.XPending
			p, err = pending[v].Result()
			if errors.Is(err, redis.Nil) {
				p, err = &redis.XPending{}, nil
			}
			if err == nil {
				sh.nextVisit = nextPoll(sh.grid, at, c.safety)
				if p.Count > 0 && !sh.active {
					sh.active = true
					sh.nextClaim = at
				} else if p.Count == 0 {
					sh.active = false
				}
			}
		}
		if err != nil {
			c.fail(ctx, i, fmt.Errorf("expset: read %s: %w", c.set.shards[i].Events, err))
			continue
		}
		sh.bo.ok()
		if cmds[k] == nil {
			sh.busy = true // not read for want of budget: read it later
			continue
		}
		sh.busy = false
		for _, st := range res {
			for _, m := range st.Messages {
				sh.busy = true
				out = append(out, delivery{shard: i, id: m.ID, values: m.Values, at: at, new: true})
			}
		}
	}
	return out
}

// claim takes over one batch of shard i's events (at most budget, when >=
// 0) left pending longer than the lease TTL; the script buries those with
// every attempt used, and the rest are returned for delivery.
func (c *consumer) claim(ctx context.Context, i, budget int) ([]delivery, error) {
	sk := &c.set.shards[i]
	sh := &c.shards[i]
	reason := fmt.Sprintf("the last handler call did not finish: its consumer stopped renewing the lease for %v (it died, or lost Redis)", c.cfg.leaseTTL)
	at := time.Now()
	v, err := c.set.run(ctx, "claim", i, scriptClaim, []string{sk.Events, sk.Dead, sk.Att},
		c.group, c.name, c.leaseMs, sh.cursor, readCount(c.cfg.batch, budget), c.cfg.maxAttempts, reason)
	if err != nil {
		return nil, err
	}
	xs, ok := v.([]any)
	if !ok || len(xs) < 1 {
		return nil, unexpected("claim.lua", v)
	}
	cursor, ok := asString(xs[0])
	if !ok {
		return nil, unexpected("claim.lua", v)
	}
	from := sh.cursor
	sh.cursor = cursor
	sh.nextClaim = time.Now()
	if cursor == "0-0" {
		sh.nextClaim = sh.nextClaim.Add(c.claimEvery)
	}
	sh.nextClaim = c.claimScan(i, from, cursor, at, sh.nextClaim)
	var out []delivery
	for _, e := range xs[1:] {
		id, used, buried, values, ok := parseClaimed(e)
		if !ok {
			return out, unexpected("claim.lua", v)
		}
		if buried {
			c.event(ctx, i, used, errors.New(reason), true)
			continue
		}
		out = append(out, delivery{shard: i, id: id, values: values, at: at})
	}
	return out, nil
}

// parseClaimed reads one {id, attempts used, buried, {field, value, ...}} of
// claim.lua.
func parseClaimed(v any) (id string, used int, buried bool, values map[string]any, ok bool) {
	e, ok := v.([]any)
	if !ok || len(e) != 4 {
		return "", 0, false, nil, false
	}
	id, ok1 := asString(e[0])
	n, ok2 := asInt64(e[1])
	b, ok3 := asInt64(e[2])
	fs, ok4 := e[3].([]any)
	values, ok5 := fieldMap(fs)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return "", 0, false, nil, false
	}
	return id, int(n), b == 1, values, true
}

// fieldMap reads a stream entry's {field, value, ...} from a script's
// reply.
func fieldMap(fs []any) (map[string]any, bool) {
	if len(fs)%2 != 0 {
		return nil, false
	}
	values := make(map[string]any, len(fs)/2)
	for j := 0; j < len(fs); j += 2 {
		k, ok := asString(fs[j])
		if !ok {
			return nil, false
		}
		values[k] = fs[j+1]
	}
	return values, true
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
// batch each, or with budget >= 0 at most budget in all, a read batch per
// shard starting from c.nextRead, so that every shard gets its turn.
func (c *consumer) readCounts(shards []int, budget int) []int {
	counts := make([]int, len(shards))
	if budget < 0 {
		for k := range counts {
			counts[k] = c.cfg.batch
		}
		return counts
	}
	n := len(c.shards)
	for step := 0; step < n && budget > 0; step++ {
		i := (c.nextRead + step) % n
		for k, s := range shards {
			if s == i && counts[k] == 0 {
				counts[k] = readCount(c.cfg.batch, budget)
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
