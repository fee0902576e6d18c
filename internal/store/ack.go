package store

// ack.go serves ack.lua: the acknowledgement of events a group has
// finished with, one shard's batch a call (Set.Consume's lease keeper,
// Reservation.Finish).

// AckCall builds ack.lua's call acknowledging leases (at most MaxBatch) of
// shard for c's group.
func (s *Store) AckCall(c Consumer, shard int, leases []Lease) *Call {
	args := leaseArgs(append(make([]any, 0, 1+2*len(leases)), c.Group), leases)
	return &Call{Op: "ack", Shard: shard, Script: scriptAck, Keys: s.hotKeys(c, shard), Args: args}
}

// ReadAck reads the reply of c, an ack.lua call of n leases: whether each
// was acknowledged (else its call no longer held it). The error is the
// call's, or ErrUnexpectedReply for a reply that is not one item per lease.
func ReadAck(c *Call, n int) ([]bool, error) { return readHeld("ack.lua", c, n) }
