package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

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

// PauseState is a consumer group's pause (pause.lua), over the shards.
type PauseState struct {
	Group  bool  // the group is paused (on some shard: on every one once Pause returned)
	Owners int64 // owners paused in the group
}

// Pauses reads the pause of each of groups on every shard (HMGET of the
// attempts hash's "G:<group>" and "Q:<group>", one pipeline).
func (s *Store) Pauses(ctx context.Context, groups []string) (map[string]PauseState, error) {
	out := make(map[string]PauseState, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([][]*redis.SliceCmd, len(s.shards))
	for i, sk := range s.shards {
		for _, g := range groups {
			cmds[i] = append(cmds[i], pipe.HMGet(ctx, sk.Att, "G:"+g, "Q:"+g))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("expset: read the groups' pauses: %w", err)
	}
	for i := range s.shards {
		for j, g := range groups {
			v := cmds[i][j].Val()
			st := out[g]
			if v[0] != nil {
				st.Group = true
			}
			if q, ok := v[1].(string); ok {
				n, err := strconv.ParseInt(q, 10, 64)
				if err != nil {
					return nil, Unexpected("pause.lua", q)
				}
				st.Owners += n
			}
			out[g] = st
		}
	}
	return out, nil
}
