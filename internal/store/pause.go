package store

import "context"

// pause.go serves pause.lua: the pause and resume of a consumer group, or
// of one owner in it (Set.Pause, Set.Resume).

// PauseCall builds pause.lua's call pausing (pause) or resuming group on
// shard: the whole group when owner is "", else owner in it.
func (s *Store) PauseCall(shard int, group, owner string, pause bool) *Call {
	op, arg := "resume", "r"
	if pause {
		op, arg = "pause", "p"
	}
	sk := &s.shards[shard]
	return &Call{Op: op, Shard: shard, Script: scriptPause, Keys: []string{sk.Events, sk.Att}, Args: []any{arg, group, owner}}
}

// Pause pauses (pause) or resumes group, or owner in it (owner not ""), on
// shards, in one pipeline, and reports whether any shard's state changed.
func (s *Store) Pause(ctx context.Context, shards []int, group, owner string, pause bool) (bool, error) {
	calls := make([]*Call, len(shards))
	for i, shard := range shards {
		calls[i] = s.PauseCall(shard, group, owner, pause)
	}
	s.RunPipelined(ctx, calls)
	changed := false
	for _, c := range calls {
		if c.Err != nil {
			return false, c.Err
		}
		n, ok := Int64(c.Reply)
		if !ok {
			return false, Unexpected("pause.lua", c.Reply)
		}
		changed = changed || n == 1
	}
	return changed, nil
}
