package expset

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/redis/go-redis/v9"
)

// The consumer groups of a set's expiry events, for operators: list them
// (Groups) and remove one with what it holds (RemoveGroup).

// GroupInfo describes one consumer group of a set's expiry events, summed
// over the shards.
type GroupInfo struct {
	Name    string
	Shards  int   // shards whose stream has the group
	Lag     int64 // events not yet read by the group (where Redis cannot tell, counted up to 1000 per shard)
	Pending int64 // events read by the group and not yet acknowledged
	Dead    int64 // the group's dead letters
	// Retrying counts the events whose handler call failed, waiting for
	// their retry delay (WithRetryBackoff, RetryAfter): part of Pending.
	Retrying int64
	// Running counts the handler calls under way that hold an owner slot
	// (WithOwnerConcurrency), and RunningOwners their owners: 5 calls of
	// owner a and 2 of b give Running 7, RunningOwners 2. Set.Running
	// lists the owners. Both are 0 in the reply of RemoveGroup.
	Running       int64
	RunningOwners int64
}

// groupLagCount is how many unread entries Groups counts per shard and
// group where Redis cannot tell the lag (entries were deleted).
const groupLagCount = 1000

// Groups returns the consumer groups of the set's expiry events, by name,
// with their lag, pending events, retries waiting, dead letters and calls
// running under owner slots. Cost: one pipelined round trip for the groups
// (one per node on a cluster), one more where Redis cannot tell a lag, one
// more where events are pending (to count the retries), one per 1000 dead
// letters of the largest dead-letter stream (each is read to learn its
// group), and one per 1000 calls under way on the busiest shard (at least
// one: see Set.Running).
func (s *Set) Groups(ctx context.Context) ([]GroupInfo, error) {
	if err := s.eventsOnly("list consumer groups"); err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XInfoGroupsCmd, len(s.shards))
	for i, sk := range s.shards {
		cmds[i] = pipe.XInfoGroups(ctx, sk.events)
	}
	_, _ = pipe.Exec(ctx) // a missing stream fails its XINFO: read per command
	byName := map[string]*GroupInfo{}
	type unknownLag struct {
		g   *GroupInfo
		cmd *redis.XMessageSliceCmd
	}
	var lags []unknownLag
	var retrying []retryCount
	pipe = s.rdb.Pipeline()
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if redis.HasErrorPrefix(err, "no such key") || redis.HasErrorPrefix(err, "ERR no such key") {
				continue
			}
			return nil, fmt.Errorf("expset: groups of %s: %w", s.shards[i].events, err)
		}
		for _, x := range c.Val() {
			g := byName[x.Name]
			if g == nil {
				g = &GroupInfo{Name: x.Name}
				byName[x.Name] = g
			}
			g.Shards++
			g.Pending += x.Pending
			if x.Pending > 0 {
				retrying = append(retrying, retryCount{s.shards[i].events, x.Name, &g.Retrying})
			}
			// Redis leaves lag (and entries-read) unknown once entries
			// were deleted; some emulators report neither right.
			if x.Lag >= 0 && x.EntriesRead > 0 {
				g.Lag += x.Lag
			} else {
				lags = append(lags, unknownLag{g, pipe.XRangeN(ctx, s.shards[i].events, "("+x.LastDeliveredID, "+", groupLagCount)})
			}
		}
	}
	if len(lags) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("expset: groups of %q: %w", s.name, err)
		}
		for _, l := range lags {
			l.g.Lag += int64(len(l.cmd.Val()))
		}
	}
	if err := s.countRetrying(ctx, retrying); err != nil {
		return nil, err
	}
	if err := s.countDead(ctx, byName); err != nil {
		return nil, err
	}
	running, _, err := s.running(ctx, "")
	if err != nil {
		return nil, err
	}
	for name, owners := range running {
		if g := byName[name]; g != nil {
			for _, n := range owners {
				g.Running += n
				g.RunningOwners++
			}
		}
	}
	out := make([]GroupInfo, 0, len(byName))
	for _, g := range byName {
		out = append(out, *g)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// countDead adds each group's dead letters to byName (a group that has
// only dead letters is listed too), reading every shard's dead-letter
// stream 1000 entries at a time, pipelined across shards.
func (s *Set) countDead(ctx context.Context, byName map[string]*GroupInfo) error {
	from := make([]string, len(s.shards))
	for i := range from {
		from[i] = "-"
	}
	for {
		pipe := s.rdb.Pipeline()
		cmds := map[int]*redis.XMessageSliceCmd{}
		for i, f := range from {
			if f != "" {
				cmds[i] = pipe.XRangeN(ctx, s.shards[i].dead, f, "+", maxBatch)
			}
		}
		if len(cmds) == 0 {
			return nil
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("expset: dead letters of %q: %w", s.name, err)
		}
		for i, c := range cmds {
			msgs := c.Val()
			for _, m := range msgs {
				name, _ := m.Values["g"].(string)
				g := byName[name]
				if g == nil {
					g = &GroupInfo{Name: name}
					byName[name] = g
				}
				g.Dead++
			}
			from[i] = ""
			if len(msgs) == maxBatch {
				from[i] = "(" + msgs[len(msgs)-1].ID
			}
		}
	}
}

// RemoveGroup removes consumer group group from every shard's stream with
// what it holds: its pending events are released (acknowledged, their
// attempts cleared), the events no other group still needs leave the
// streams, and its dead letters are deleted. It returns what the group
// held, or an error matching ErrNotFound when no shard had the group or
// a dead letter of it. Stop the group's consumers first, and take it out of
// WithConsumerGroups: a Consume of the group, or an Open or Consume that
// declares it and finds a stream missing, creates it again. Cost: one
// pipelined script call per shard (one round trip per node on a cluster),
// and one more round per 1000 pending events or dead letters of the
// largest shard; each call does at most 1000 items of work.
func (s *Set) RemoveGroup(ctx context.Context, group string) (GroupInfo, error) {
	if err := s.eventsOnly("remove a consumer group"); err != nil {
		return GroupInfo{}, err
	}
	if err := validateConsumerName(group); err != nil {
		return GroupInfo{}, err
	}
	out := GroupInfo{Name: group}
	defer s.reserves.forget(group) // a later Reserve makes it again, unreported
	cursor := make([]string, len(s.shards))
	for i := range cursor {
		cursor[i] = "-"
	}
	found := false
	for {
		var calls []*scriptCall
		for i, c := range cursor {
			if c == "" {
				continue
			}
			sk := &s.shards[i]
			calls = append(calls, &scriptCall{op: "remove-group", shard: i, sc: scriptRemoveGroup,
				keys: []string{sk.events, sk.dead, sk.att}, args: []any{group, c}})
		}
		if len(calls) == 0 {
			break
		}
		s.runPipelined(ctx, calls)
		for _, c := range calls {
			if c.err != nil {
				return out, c.err
			}
			xs, ok := c.v.([]any)
			if !ok || len(xs) != 6 {
				return out, unexpected("remove_group.lua", c.v)
			}
			done, ok1 := asInt64(xs[0])
			released, ok2 := asInt64(xs[1])
			lag, ok3 := asInt64(xs[2])
			dead, ok4 := asInt64(xs[3])
			next, ok5 := asString(xs[4])
			on, ok6 := asInt64(xs[5])
			if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
				return out, unexpected("remove_group.lua", c.v)
			}
			out.Pending += released
			out.Lag += max(lag, 0)
			out.Dead += dead
			if on == 1 && cursor[c.shard] == "-" && (done == 1 || next != "-") {
				out.Shards++
			}
			found = found || on == 1 || dead > 0
			cursor[c.shard] = next
			if done == 1 {
				cursor[c.shard] = ""
			}
		}
	}
	if !found {
		return out, fmt.Errorf("%w: set %q has no consumer group %q", ErrNotFound, s.name, group)
	}
	return out, nil
}

// eventsOnly checks that s is opened and has expiry events, for what.
func (s *Set) eventsOnly(what string) error {
	if err := s.opened(); err != nil {
		return err
	}
	if !s.events {
		return fmt.Errorf("%w: set %q has no expiry events: nothing to %s", ErrInvalidArgument, s.name, what)
	}
	return nil
}

// WithConsumerGroups declares the consumer groups that consume the set's
// expiry events (the set needs WithExpiryEvents; names of 1 to
// 256 bytes). Open creates each group on every shard's stream,
// starting at the oldest event retained, so that events are kept for a group
// from then on, even before its first Consume runs: an event leaves its
// stream only once every group on it has handled or dead-lettered it. A
// Consume that finds a shard's stream deleted makes it again with these
// groups and its own. Groups not declared are created by their first
// Consume, from the oldest event still retained then. Default: none; no
// names declares none.
func WithConsumerGroups(groups ...string) OpenOption {
	return openOption(func(c *setConfig) error {
		for _, g := range groups {
			if g == "" || len(g) > maxConsumerLen {
				return fmt.Errorf("%w: WithConsumerGroups: group %q must be 1 to %d bytes", ErrInvalidArgument, g, maxConsumerLen)
			}
		}
		c.groups = append(c.groups, groups...)
		return nil
	})
}

// createGroups creates group and the set's declared groups on shard i's
// stream (and the stream, when missing), starting at its oldest entry; a
// group that exists is left as it is.
func (s *Set) createGroups(ctx context.Context, i int, group string) error {
	groups := s.groups
	if group != "" {
		groups = append([]string{group}, s.groups...)
	}
	key := s.shards[i].events
	for _, g := range groups {
		err := s.rdb.XGroupCreateMkStream(ctx, key, g, "0").Err()
		if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return fmt.Errorf("expset: create group %q on %s: %w", g, key, err)
		}
	}
	return nil
}

// makeGroups creates the consumer's group and the declared groups on shard
// i's stream (createGroups), unless a Reserve of the set made them there
// already (the consumer is Reserve's).
func (c *consumer) makeGroups(ctx context.Context, i int) error {
	if c.reserving != nil && c.reserving.isGrouped(c.group, i) {
		return nil
	}
	if err := c.set.createGroups(ctx, i, c.group); err != nil {
		return err
	}
	if c.reserving != nil {
		c.reserving.grouped(c.group, i, len(c.shards), true)
	}
	return nil
}

// declareGroups creates the declared groups on every shard's stream.
func (s *Set) declareGroups(ctx context.Context) error {
	if len(s.groups) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	for _, sk := range s.shards {
		for _, g := range s.groups {
			pipe.XGroupCreateMkStream(ctx, sk.events, g, "0")
		}
	}
	cmds, _ := pipe.Exec(ctx)
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return fmt.Errorf("expset: open %q: create consumer group: %w", s.name, err)
		}
	}
	return nil
}
