package expset

import (
	"context"
	"fmt"
	"time"
)

// Pause stops new handler calls of consumer group group on every shard, or,
// with owner not "", of owner's events in it, until Resume: no call begins
// while it is paused, in any process; calls under way run to their end and
// settle as usual. Events held back by a pause are not charged an attempt:
// a Consume keeps them set aside, reads nothing new while the whole group
// is paused, and asks again every second; Resume wakes them at once, and
// they are handled in their order. A Reserve of a paused group hands them
// back, uncharged, and waits as with no event. The pause is kept in Redis
// (each shard's attempts hash), so it outlives every process, and applies
// to every consumer of the group, and to a group not made yet. RemoveGroup
// clears a group's own pause; owners paused in it stay paused until
// resumed. Pausing an owner of a paused group, or the group with owners
// paused, keeps both.
//
// It reports whether it changed anything (false: paused already). Cost: one
// script per shard, in one pipeline (an owner: its shard's only). Every
// begin of a handler call reads the group's pause in the same script, one
// HGET. Pause is safe for concurrent use.
func (s *Set) Pause(ctx context.Context, group, owner string) (bool, error) {
	return s.pause(ctx, group, owner, true)
}

// Resume ends a Pause of consumer group group (owner ""), or of owner in
// it, and wakes the consumers holding the events it held back. It reports
// whether it changed anything (false: not paused).
func (s *Set) Resume(ctx context.Context, group, owner string) (bool, error) {
	return s.pause(ctx, group, owner, false)
}

// PausedOwners returns the owners paused in consumer group group (Pause
// with an owner) that Resume has not resumed, sorted by their bytes, also
// in a group that does not exist (yet, or since RemoveGroup).
// GroupInfo.PausedOwners counts them. None paused: nil and no error. A
// Pause or Resume made meanwhile may or may not show. An empty group or
// one of more than 256 bytes, or a set without WithExpiryEvents, gets
// ErrInvalidArgument and reads nothing.
//
// Cost: one pipelined round trip (one per node on a cluster) reads each
// shard's count of owners paused in the group; each shard with some then
// has its attempts hash scanned until they are found: the hash holds a
// field per event begun in every group beside the pauses, and each call
// (HSCAN) walks about 1000 of its fields, so none holds the server long,
// one pipelined round trip per 1000 fields of the largest hash scanned.
// PausedOwners is safe for concurrent use.
func (s *Set) PausedOwners(ctx context.Context, group string) ([]string, error) {
	if err := s.eventsOnly("list the owners paused in a consumer group"); err != nil {
		return nil, err
	}
	if err := validateConsumerName(group); err != nil {
		return nil, err
	}
	return s.st.PausedOwners(ctx, group)
}

func (s *Set) pause(ctx context.Context, group, owner string, pause bool) (bool, error) {
	op := "pause"
	if !pause {
		op = "resume"
	}
	if err := s.eventsOnly(op + " a consumer group"); err != nil {
		return false, err
	}
	if err := validateConsumerName(group); err != nil {
		return false, err
	}
	shards := make([]int, len(s.shards))
	for i := range shards {
		shards[i] = i
	}
	if owner != "" {
		if err := validateOwner(owner); err != nil {
			return false, fmt.Errorf("%w (%s an owner)", err, op)
		}
		shards = []int{s.ShardOf(owner)}
	}
	return s.st.Pause(ctx, shards, group, owner, pause)
}

// pausedLately reports whether a begin found the group paused less than a
// second ago (parkPoll) with nothing begun or woken since: no new call can
// begin.
func (c *consumer) pausedLately(now time.Time) bool {
	return !c.paused.IsZero() && now.Sub(c.paused) < parkPoll
}
