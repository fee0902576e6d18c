package store

import "context"

// running.go serves running.lua: the handler calls running per group and
// owner (Set.Running, Set.Groups), read shard by shard in pages.

// runningCall builds running.lua's call: shard's calls of group ("" for
// every group) from cursor ("0" to start).
func (s *Store) runningCall(shard int, group, cursor string) *Call {
	sk := &s.shards[shard]
	return &Call{Op: "running", Shard: shard, Script: scriptRunning,
		Keys: []string{sk.Runo, sk.Events}, Args: []any{group, cursor}}
}

// readRunning reads running.lua's reply, {on, cursor, group, owner, calls,
// ...}, into out; on is whether the stream has the group, more the cursor
// of the next page ("0" when none).
func readRunning(v any, out map[string]map[string]int64) (on bool, more string, err error) {
	xs, ok := v.([]any)
	if !ok || len(xs) < 2 || len(xs)%3 != 2 {
		return false, "", Unexpected("running.lua", v)
	}
	o, ok1 := Int64(xs[0])
	more, ok2 := String(xs[1])
	if !ok1 || !ok2 {
		return false, "", Unexpected("running.lua", v)
	}
	for j := 2; j < len(xs); j += 3 {
		g, ok1 := String(xs[j])
		owner, ok2 := String(xs[j+1])
		n, ok3 := Int64(xs[j+2])
		if !ok1 || !ok2 || !ok3 {
			return false, "", Unexpected("running.lua", v)
		}
		if out[g] == nil {
			out[g] = map[string]int64{}
		}
		out[g][owner] += n
	}
	return o == 1, more, nil
}

// Running runs running.lua on every shard, in pipelined pages, and returns
// the calls running per group and owner; found is whether some shard's
// stream has group (always true for group "").
func (s *Store) Running(ctx context.Context, group string) (running map[string]map[string]int64, found bool, err error) {
	out := map[string]map[string]int64{}
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
			return out, found, nil
		}
		s.RunPipelined(ctx, calls)
		for _, c := range calls {
			if c.Err != nil {
				return nil, false, c.Err
			}
			on, more, err := readRunning(c.Reply, out)
			if err != nil {
				return nil, false, err
			}
			found = found || on
			cursor[c.Shard] = more
		}
	}
}
