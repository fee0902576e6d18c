package store

import "context"

// remove_group.go serves remove_group.lua: Set.RemoveGroup, shard by shard
// in steps.

// removeGroupCall builds remove_group.lua's call: group's step in shard
// from cursor ("-" first, then what the previous step returned).
func (s *Store) removeGroupCall(shard int, group, cursor string) *Call {
	sk := &s.shards[shard]
	return &Call{Op: "remove-group", Shard: shard, Script: scriptRemoveGroup,
		Keys: []string{sk.Events, sk.Dead, sk.Att, sk.Runo}, Args: []any{group, cursor}}
}

// groupStep is one remove_group.lua reply: whether the shard is done, the
// events released from the group's pending list, its lag, its dead letters
// removed, the cursor of the next step, and whether the stream had the
// group.
type groupStep struct {
	done                bool
	released, lag, dead int64
	next                string
	on                  bool
}

// readRemoveGroup reads remove_group.lua's reply: {done, released, lag,
// dead, next cursor, on}.
func readRemoveGroup(v any) (groupStep, error) {
	xs, ok := v.([]any)
	if !ok || len(xs) != 6 {
		return groupStep{}, Unexpected("remove_group.lua", v)
	}
	done, ok1 := Int64(xs[0])
	released, ok2 := Int64(xs[1])
	lag, ok3 := Int64(xs[2])
	dead, ok4 := Int64(xs[3])
	next, ok5 := String(xs[4])
	on, ok6 := Int64(xs[5])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return groupStep{}, Unexpected("remove_group.lua", v)
	}
	return groupStep{done: done == 1, released: released, lag: lag, dead: dead, next: next, on: on == 1}, nil
}

// GroupRemoved is what RemoveGroup removed: the shards whose stream had the
// group, its pending events, its lag (events it had not read) and its
// dead letters.
type GroupRemoved struct {
	Shards             int
	Pending, Lag, Dead int64
}

// RemoveGroup runs remove_group.lua on every shard, in pipelined steps,
// until each is done. found is false when no shard had the group or its
// dead letters.
func (s *Store) RemoveGroup(ctx context.Context, group string) (out GroupRemoved, found bool, err error) {
	cursor := make([]string, len(s.shards))
	for i := range cursor {
		cursor[i] = "-"
	}
	for {
		var calls []*Call
		for i, c := range cursor {
			if c != "" {
				calls = append(calls, s.removeGroupCall(i, group, c))
			}
		}
		if len(calls) == 0 {
			return out, found, nil
		}
		s.RunPipelined(ctx, calls)
		for _, c := range calls {
			if c.Err != nil {
				return out, found, c.Err
			}
			st, err := readRemoveGroup(c.Reply)
			if err != nil {
				return out, found, err
			}
			out.Pending += st.released
			out.Lag += max(st.lag, 0)
			out.Dead += st.dead
			if st.on && cursor[c.Shard] == "-" && (st.done || st.next != "-") {
				out.Shards++
			}
			found = found || st.on || st.dead > 0
			cursor[c.Shard] = st.next
			if st.done {
				cursor[c.Shard] = ""
			}
		}
	}
}
