package expset

import (
	"context"
	"fmt"
	"sort"
	"time"
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
	// Running counts the handler calls under way, of every consumer, of
	// members and of jobs, and RunningOwners their owners (a job's call has
	// none): 5 calls of owner a, 2 of b and 1 of a job give Running 8,
	// RunningOwners 2. OldestRunning is when the oldest of them began (zero
	// when none runs). HeldBack counts the pending events no call has and
	// no retry waits for (RunningCalls.HeldBack): Pending = Retrying +
	// Running + HeldBack, but for events acknowledged between the reads.
	// Set.Running lists the calls. These are zero in the reply of
	// RemoveGroup.
	Running       int64
	RunningOwners int64
	OldestRunning time.Time
	HeldBack      int64
	// Paused reports the group paused (Set.Pause), PausedOwners how many
	// owners are paused in it (Set.PausedOwners lists them): their events
	// are held back.
	Paused       bool
	PausedOwners int64
}

// Groups returns the consumer groups of the set's expiry events, by name,
// with their lag, pending events, retries waiting, dead letters, calls
// running, events held back and pauses. A group that holds nothing yet
// is listed while it is paused, or has owners paused, with Shards 0: one
// paused before any Consume made it, or removed with owners paused in it.
// Cost: one pipelined round trip for the groups (one per node on a
// cluster), one more where Redis cannot tell a lag, one more where events
// are pending (to count the retries), one per 1000 dead letters of the
// largest dead-letter stream (each is read to learn its group), one per
// 1000 events with a call begun on the busiest shard (at least one: see
// Set.Running), and one per 1000 fields of the largest attempts hash for
// the pauses (a field per group for each event a call has begun and not
// settled, a few per pause).
func (s *Set) Groups(ctx context.Context) ([]GroupInfo, error) {
	if err := s.eventsOnly("list consumer groups"); err != nil {
		return nil, err
	}
	shards, err := s.st.Groups(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*GroupInfo{}
	var retrying []retryCount
	for i, gs := range shards {
		for _, x := range gs {
			g := byName[x.Name]
			if g == nil {
				g = &GroupInfo{Name: x.Name}
				byName[x.Name] = g
			}
			g.Shards++
			g.Pending += x.Pending
			if x.Pending > 0 {
				retrying = append(retrying, retryCount{i, x.Name, &g.Retrying})
			}
			g.Lag += x.Lag
		}
	}
	if err := s.countRetrying(ctx, retrying); err != nil {
		return nil, err
	}
	dead, err := s.st.DeadByGroup(ctx)
	if err != nil {
		return nil, err
	}
	for name, n := range dead {
		g := byName[name]
		if g == nil {
			g = &GroupInfo{Name: name}
			byName[name] = g
		}
		g.Dead += n
	}
	if err := s.countRunning(ctx, byName); err != nil {
		return nil, err
	}
	pauses, err := s.st.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	for name, p := range pauses {
		g := byName[name]
		if g == nil { // paused before it was made, or removed with owners paused
			g = &GroupInfo{Name: name}
			byName[name] = g
		}
		g.Paused, g.PausedOwners = p.Group, p.Owners
	}
	out := make([]GroupInfo, 0, len(byName))
	for _, g := range byName {
		out = append(out, *g)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// countRunning counts the calls running in each group of byName, their
// owners and the events held back (from Pending and Retrying, counted
// before), and notes the oldest call's start.
func (s *Set) countRunning(ctx context.Context, byName map[string]*GroupInfo) error {
	read, _, err := s.st.Running(ctx, "")
	if err != nil {
		return err
	}
	now := time.Now()
	owners := map[string]map[string]bool{}
	for _, b := range read.Begun {
		g := byName[b.Group]
		c, ok := runningCall(b, now)
		if g == nil || !ok {
			continue
		}
		g.Running++
		if c.Owner != "" && !owners[b.Group][c.Owner] {
			if owners[b.Group] == nil {
				owners[b.Group] = map[string]bool{}
			}
			owners[b.Group][c.Owner] = true
			g.RunningOwners++
		}
		if !c.Started.IsZero() && (g.OldestRunning.IsZero() || c.Started.Before(g.OldestRunning)) {
			g.OldestRunning = c.Started
		}
	}
	for _, g := range byName {
		g.HeldBack = max(g.Pending-g.Retrying-g.Running, 0)
	}
	return nil
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
	defer s.reserves.forget(group) // a later Reserve makes it again, unreported
	r, found, err := s.st.RemoveGroup(ctx, group)
	out := GroupInfo{Name: group, Shards: r.Shards, Pending: r.Pending, Lag: r.Lag, Dead: r.Dead}
	if err != nil {
		return out, err
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
	return s.st.CreateGroups(ctx, i, groups)
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
	return s.st.DeclareGroups(ctx, s.groups)
}
