package store

import "context"

// release.go serves release.lua: events a consumer holds and will not
// handle handed back for prompt redelivery, uncharged, or with the
// attempt of one call given back (Set.Consume, Set.Reserve).

// releaseCall builds release.lua's call for c: ids (at most MaxBatch) of
// shard released, and the attempt of refund's call given back (refund.ID
// "": none).
func (s *Store) releaseCall(c Consumer, shard int, ids []string, refund Lease) *Call {
	args := make([]any, 0, 5+len(ids))
	args = append(args, c.Group, c.Name, c.leaseMs(), refund.ID, refund.Token)
	for _, id := range ids {
		args = append(args, id)
	}
	return &Call{Op: "release", Shard: shard, Script: scriptRelease, Keys: s.leaseKeys(shard), Args: args}
}

// Release runs release.lua for ids of shard, MaxBatch a call, each call
// giving back the attempt of refund's call (it is given back once), and
// returns the first error, after which it sends no more. The reply (how
// many were released) is not read.
func (s *Store) Release(ctx context.Context, c Consumer, shard int, ids []string, refund Lease) error {
	for len(ids) > 0 {
		batch := ids[:min(len(ids), MaxBatch)]
		ids = ids[len(batch):]
		if _, err := s.run(ctx, s.releaseCall(c, shard, batch, refund)); err != nil {
			return err
		}
	}
	return nil
}
