package expset

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/expset/expset/internal/store"
)

// The handler calls under way in a consumer group, for operators:
// Set.Running, and the totals in GroupInfo (Set.Groups).

// RunningCall is one handler call under way in a consumer group
// (Set.Running).
type RunningCall struct {
	Owner    string // the member's owner; "" for a job of Set.Put or a schedule's tick, whose ID is Member
	Member   string
	Tick     bool // a tick of a schedule (Set.PutSchedule)
	Attempt  int  // the handler call this is for the event in its group: 1 for the first
	Consumer string
	// Started is when the call began, to the millisecond, by its
	// consumer's machine (or its Set's WithClock); LeaseEnd when its lease lapses unless renewed: the
	// last renewal plus the consumer's lease TTL (WithLeaseTTL). A LeaseEnd
	// past means the consumer died or stalled: the call is listed until
	// another consumer claims its event. Both are zero for a call begun
	// by an older expset, whose token carries neither.
	Started  time.Time
	LeaseEnd time.Time
	Shard    int    // the shard whose stream carries the event
	ID       string // the entry's ID in that stream
}

// RunningCalls is what Set.Running reads of a consumer group.
type RunningCalls struct {
	Calls   []RunningCall // the oldest first (by Started), at most n
	Running int64         // every call under way in the group, also past n
	Owners  int64         // the owners of those calls (a job's or a tick's call has none)
	// HeldBack counts the group's events read by a consumer with no call
	// under way and no retry waiting: set aside because their owner holds
	// every slot (WithOwnerConcurrency), read ahead of free call slots, or
	// claimed and not yet begun. They are pending, but not slow: no
	// handler has them.
	HeldBack int64
}

// maxRunningCalls is the most calls Running lists.
const maxRunningCalls = 10_000

// Running returns the handler calls under way in consumer group group,
// the oldest first, at most n of them (1 to 10,000), with how many run in
// all, of how many owners, and how many of the group's pending events no
// call has (RunningCalls.HeldBack). Every call counts: of any Consume or
// Reserve, with or without WithOwnerConcurrency, of members and of jobs.
// A call whose consumer died is listed until another consumer of the group
// claims its event, once its lease TTL has passed unrenewed. A call that
// ended counts until its acknowledgement is sent (at most 100ms later). It
// returns an error matching ErrNotFound when no shard's stream has the
// group. Running only reads, and is safe for concurrent use. Cost: one
// pipelined script call per shard (one round trip per node on a cluster),
// and one more round per about 1000 events with a call begun on the
// busiest shard, of every group, calls waiting for a retry included.
func (s *Set) Running(ctx context.Context, group string, n int) (RunningCalls, error) {
	if err := s.eventsOnly("list the calls running"); err != nil {
		return RunningCalls{}, err
	}
	if err := validateConsumerName(group); err != nil {
		return RunningCalls{}, err
	}
	if n < 1 || n > maxRunningCalls {
		return RunningCalls{}, fmt.Errorf("%w: Running's n %d: want 1 to %d calls", ErrInvalidArgument, n, maxRunningCalls)
	}
	read, found, err := s.st.Running(ctx, group)
	if err != nil {
		return RunningCalls{}, err
	}
	if !found {
		return RunningCalls{}, fmt.Errorf("%w: set %q has no consumer group %q", ErrNotFound, s.name, group)
	}
	now := time.Now()
	var out RunningCalls
	owners := map[string]bool{}
	for _, b := range read.Begun {
		c, ok := runningCall(b, now)
		if !ok {
			continue
		}
		out.Calls = append(out.Calls, c)
		if c.Owner != "" {
			owners[c.Owner] = true
		}
	}
	sortCalls(out.Calls)
	out.Running, out.Owners = int64(len(out.Calls)), int64(len(owners))
	out.HeldBack = max(read.Waiting-out.Running, 0) // the reads are not one
	out.Calls = out.Calls[:min(n, len(out.Calls))]
	return out, nil
}

// runningCall returns the call under way of b, an event read at now with a
// call begun; ok is false when none is: another consumer holds the event
// (it claimed it and has not begun it), or the call's owner slot is gone
// (the call ended or its lease lapsed).
func runningCall(b store.BegunEvent, now time.Time) (c RunningCall, ok bool) {
	c = RunningCall{Owner: b.Owner, Member: b.Member, Attempt: int(b.Attempt), Consumer: b.Consumer, Shard: b.Shard, ID: b.ID}
	if isJobOwner(b.Owner) {
		c.Owner, c.Tick = "", b.Owner == scheduleOwner
	}
	ti, known := parseCallToken(b.Token)
	if !known {
		return c, true
	}
	if ti.consumer != consumerHash(b.Consumer) || (ti.slot && !b.Slotted) {
		return RunningCall{}, false
	}
	c.Started, c.LeaseEnd = ti.start, now.Add(ti.lease-b.Idle).Truncate(time.Millisecond)
	return c, true
}

// sortCalls sorts cs oldest first, those of unknown start last, then by
// shard and entry ID.
func sortCalls(cs []RunningCall) {
	sort.Slice(cs, func(a, b int) bool {
		x, y := cs[a], cs[b]
		if x.Started.IsZero() != y.Started.IsZero() {
			return y.Started.IsZero()
		}
		if !x.Started.Equal(y.Started) {
			return x.Started.Before(y.Started)
		}
		if x.Shard != y.Shard {
			return x.Shard < y.Shard
		}
		return x.ID < y.ID
	})
}
