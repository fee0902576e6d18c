package store

import "context"

// kick.go serves kick.lua: Set.Kick of dead letters back into the event
// stream.

// kickCall builds kick.lua's call: dead letters ids (at most MaxBatch) of
// shard back into its stream.
func (s *Store) kickCall(shard int, ids []string) *Call {
	sk := &s.shards[shard]
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return &Call{Op: "kick", Shard: shard, Script: scriptKick, Keys: []string{sk.Dead, sk.Events}, Args: args}
}

// readKick reads kick.lua's reply: the dead letters kicked.
func readKick(v any) (int64, error) {
	n, ok := Int64(v)
	if !ok {
		return 0, Unexpected("kick.lua", v)
	}
	return n, nil
}

// Kick runs kick.lua and returns how many of the dead letters ids of shard
// it put back.
func (s *Store) Kick(ctx context.Context, shard int, ids []string) (int64, error) {
	v, err := s.run(ctx, s.kickCall(shard, ids))
	if err != nil {
		return 0, err
	}
	return readKick(v)
}
