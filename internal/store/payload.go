package store

import "context"

// payload.go serves payload.lua: Set.Payload of a live member.

// payloadCall builds payload.lua's call for member of owner.
func (s *Store) payloadCall(owner, member string) *Call {
	return &Call{Op: "payload", Shard: s.ShardOf(owner), Script: scriptPayload, Keys: s.ownerKeys(owner), Args: []any{s.now(), member}}
}

// readPayload reads payload.lua's reply: false (nil here, found false) for
// a member absent or expired, else {deadline} or {deadline, payload}; the
// payload is nil when the member has none.
func readPayload(v any) (payload []byte, found bool, err error) {
	if v == nil {
		return nil, false, nil
	}
	xs, ok := v.([]any)
	if !ok || len(xs) < 1 || len(xs) > 2 {
		return nil, false, Unexpected("payload.lua", v)
	}
	if len(xs) == 1 || xs[1] == nil {
		return nil, true, nil
	}
	p, ok := String(xs[1])
	if !ok {
		return nil, false, Unexpected("payload.lua", v)
	}
	return []byte(p), true, nil
}

// Payload runs payload.lua and returns member's payload (nil when it has
// none); found is false when the member is absent or expired.
func (s *Store) Payload(ctx context.Context, owner, member string) (payload []byte, found bool, err error) {
	v, err := s.run(ctx, s.payloadCall(owner, member))
	if err != nil {
		return nil, false, err
	}
	return readPayload(v)
}
