package store

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// running.go serves running.lua: the events with a handler call begun and
// not finished, per group, with their pending state (Set.Running,
// Set.Groups), read shard by shard in pages.

// BegunEvent is an event of a group whose attempts field carries a call's token
// and no retry time, pending under a consumer other than RetryHolder, as
// running.lua read it. Whether a call of it is under way is the caller's
// to tell from Token, Consumer and Slotted.
type BegunEvent struct {
	Shard         int
	Group, ID     string
	Consumer      string        // the consumer holding it pending
	Idle          time.Duration // since its last delivery, claim or lease renewal
	Deliveries    int64
	Attempt       int64  // handler calls begun of it in the group
	Token         string // the last call's
	Slotted       bool   // the last call holds an owner slot
	Owner, Member string // the event's ("" both when the entry was deleted)
}

// RunningRead is what Running read.
type RunningRead struct {
	Begun []BegunEvent
	// Waiting counts the group's pending entries not held for a retry
	// (only when Running was given a group).
	Waiting int64
}

// runningCall builds running.lua's call: shard's begun events of group
// ("" for every group) from cursor ("0" to start).
func (s *Store) runningCall(shard int, group, cursor string) *Call {
	sk := &s.shards[shard]
	return &Call{Op: "running", Shard: shard, Script: scriptRunning,
		Keys: []string{sk.Att, sk.Events}, Args: []any{group, cursor}}
}

// readRunning reads running.lua's reply, {on, cursor, waiting, then group,
// ID, consumer, idle, deliveries, attempts value, owner, member for each
// event}, adding to out (keyed by shard, ID and group: a scan may return a
// field twice); on is whether the stream has the group, more the cursor of
// the next page ("0" when none).
func readRunning(shard int, v any, out map[string]BegunEvent) (on bool, more string, waiting int64, err error) {
	xs, ok := v.([]any)
	if !ok || len(xs) < 3 || (len(xs)-3)%8 != 0 {
		return false, "", 0, Unexpected("running.lua", v)
	}
	o, ok1 := Int64(xs[0])
	more, ok2 := String(xs[1])
	waiting, ok3 := Int64(xs[2])
	if !ok1 || !ok2 || !ok3 {
		return false, "", 0, Unexpected("running.lua", v)
	}
	for j := 3; j < len(xs); j += 8 {
		var b BegunEvent
		var okv [8]bool
		var idle int64
		var value string
		b.Group, okv[0] = String(xs[j])
		b.ID, okv[1] = String(xs[j+1])
		b.Consumer, okv[2] = String(xs[j+2])
		idle, okv[3] = Int64(xs[j+3])
		b.Deliveries, okv[4] = Int64(xs[j+4])
		value, okv[5] = String(xs[j+5])
		b.Owner, okv[6] = String(xs[j+6])
		b.Member, okv[7] = String(xs[j+7])
		for _, ok := range okv {
			if !ok {
				return false, "", 0, Unexpected("running.lua", v)
			}
		}
		// "<calls> <token>" or "<calls> <token> <slot>", a slot's field
		// "F:..." or "N:..." (groups.lua).
		calls, rest, ok1 := strings.Cut(value, " ")
		tok, slot, _ := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(calls, 10, 64)
		if !ok1 || err != nil || tok == "" || (slot != "" && slot[0] != 'F' && slot[0] != 'N') {
			return false, "", 0, Unexpected("running.lua", v)
		}
		b.Shard, b.Idle, b.Attempt, b.Token, b.Slotted = shard, time.Duration(idle)*time.Millisecond, n, tok, slot != ""
		out[strconv.Itoa(shard)+" "+b.ID+" "+b.Group] = b
	}
	return o == 1, more, waiting, nil
}

// Running runs running.lua on every shard, in pipelined pages, and returns
// the events of group ("" for every group) with a handler call begun and
// not finished; found is whether some shard's stream has group (always
// true for group "").
func (s *Store) Running(ctx context.Context, group string) (r RunningRead, found bool, err error) {
	seen := map[string]BegunEvent{}
	found = group == ""
	cursor := make([]string, len(s.shards))
	for i := range cursor {
		cursor[i] = "0"
	}
	started := false
	for {
		var calls []*Call
		for i, c := range cursor {
			if c != "0" || !started {
				calls = append(calls, s.runningCall(i, group, c))
			}
		}
		started = true
		if len(calls) == 0 {
			break
		}
		s.RunPipelined(ctx, calls)
		for _, c := range calls {
			if c.Err != nil {
				return RunningRead{}, false, c.Err
			}
			on, more, waiting, err := readRunning(c.Shard, c.Reply, seen)
			if err != nil {
				return RunningRead{}, false, err
			}
			found = found || on
			r.Waiting += waiting
			cursor[c.Shard] = more
		}
	}
	for _, b := range seen {
		r.Begun = append(r.Begun, b)
	}
	return r, found, nil
}
