package store

import "context"

// remove.go serves remove.lua: Set.Remove (and Quota.Release) of members.

// removeCall builds remove.lua's call: members (at most MaxBatch) out of
// owner's set, the owner's wait line told of the slots freed.
func (s *Store) removeCall(owner string, members []string) *Call {
	args := make([]any, 0, 3+len(members))
	args = append(args, s.now(), owner, s.flags)
	for _, m := range members {
		args = append(args, m)
	}
	return &Call{Op: "remove", Shard: s.ShardOf(owner), Script: scriptRemove, Keys: s.lineKeys(owner), Args: args}
}

// readRemove reads remove.lua's reply to a call of sent members: the live
// members removed and how many of the members it went through (1 to sent).
func readRemove(v any, sent int) (removed, taken int, err error) {
	xs, ok := v.([]any)
	if !ok || len(xs) != 2 {
		return 0, 0, Unexpected("remove.lua", v)
	}
	n, ok1 := Int64(xs[0])
	t, ok2 := Int64(xs[1])
	if !ok1 || !ok2 || t < 1 || t > int64(sent) {
		return 0, 0, Unexpected("remove.lua", v)
	}
	return int(n), int(t), nil
}

// Remove runs remove.lua until every member is gone through, at most
// MaxBatch a call (fewer when their payloads pass about 1 MiB), and returns
// how many live members it removed: up to the error, with one.
func (s *Store) Remove(ctx context.Context, owner string, members []string) (int, error) {
	total := 0
	for len(members) > 0 {
		batch := members[:min(len(members), MaxBatch)]
		v, err := s.run(ctx, s.removeCall(owner, batch))
		if err != nil {
			return total, err
		}
		n, taken, err := readRemove(v, len(batch))
		if err != nil {
			return total, err
		}
		total += n
		members = members[taken:]
	}
	return total, nil
}
