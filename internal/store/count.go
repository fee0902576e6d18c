package store

import "context"

// count.go serves count.lua: Set.Count of an owner's live members.

// countCall builds count.lua's call for owner.
func (s *Store) countCall(owner string) *Call {
	return &Call{Op: "count", Shard: s.ShardOf(owner), Script: scriptCount, Keys: s.ownerKeys(owner)[:1], Args: []any{s.now()}}
}

// readCount reads count.lua's reply: the number of live members.
func readCount(v any) (int, error) {
	n, ok := Int64(v)
	if !ok {
		return 0, Unexpected("count.lua", v)
	}
	return int(n), nil
}

// Count runs count.lua and returns the number of owner's live members.
func (s *Store) Count(ctx context.Context, owner string) (int, error) {
	v, err := s.run(ctx, s.countCall(owner))
	if err != nil {
		return 0, err
	}
	return readCount(v)
}
