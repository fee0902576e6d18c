package store

import "context"

// renew.go serves renew.lua: the renewal of handler calls' leases, one
// shard's batch a call (Set.Consume's lease keeper, Reservation.Touch).

// RenewCall builds renew.lua's call renewing leases (at most MaxBatch) of
// shard for c.
func (s *Store) RenewCall(c Consumer, shard int, leases []Lease) *Call {
	args := leaseArgs(append(make([]any, 0, 3+2*len(leases)), c.Group, c.Name, c.leaseMs()), leases)
	return &Call{Op: "renew", Shard: shard, Script: scriptRenew, Keys: s.hotKeys(c, shard), Args: args}
}

// ReadRenew reads the reply of c, a renew.lua call of n leases: whether
// each was renewed (else the lease is no longer its call's). The error is
// the call's, or ErrUnexpectedReply for a reply that is not one item per
// lease.
func ReadRenew(c *Call, n int) ([]bool, error) { return readHeld("renew.lua", c, n) }

// Renew renews lease of shard for c, in one call, and reports whether the
// lease was still its call's.
func (s *Store) Renew(ctx context.Context, c Consumer, shard int, lease Lease) (bool, error) {
	call := s.RenewCall(c, shard, []Lease{lease})
	s.Run(ctx, call)
	held, err := ReadRenew(call, 1)
	if err != nil {
		return false, err
	}
	return held[0], nil
}
