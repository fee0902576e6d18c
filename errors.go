package expset

import "errors"

// Sentinel errors. Errors returned by this package wrap one of these with %w
// and name the argument or key involved; match them with errors.Is.
var (
	// ErrNotFound means the member is absent or already expired.
	ErrNotFound = errors.New("expset: member not found")

	// ErrInvalidName means a set name is empty, longer than MaxNameLen, or
	// holds a character other than ASCII letters, digits and "_.:/-" (the
	// name is part of every key's hash tag).
	ErrInvalidName = errors.New("expset: invalid name")

	// ErrInvalidOwner means an owner is empty or longer than MaxOwnerLen.
	ErrInvalidOwner = errors.New("expset: invalid owner")

	// ErrInvalidMember means a member is empty or longer than MaxMemberLen.
	ErrInvalidMember = errors.New("expset: invalid member")

	// ErrInvalidTTL means a ttl is under one millisecond or over MaxTTL.
	ErrInvalidTTL = errors.New("expset: invalid ttl")

	// ErrInvalidLimit means a quota limit is under 1 or over MaxLimit.
	ErrInvalidLimit = errors.New("expset: invalid limit")

	// ErrInvalidOption means an option has a value out of its range, or was
	// given to a call it does not apply to.
	ErrInvalidOption = errors.New("expset: invalid option")

	// ErrInvalidPayload means a payload is longer than MaxPayloadLen, or was
	// given to a set opened without WithPayloads.
	ErrInvalidPayload = errors.New("expset: invalid payload")

	// ErrConfigMismatch means the set was first opened with another shard
	// count or other options recorded in Redis; opening it differently would
	// orphan data or lose expiry events. The message shows the recorded
	// options to open it with; OpenExisting reads and uses them.
	ErrConfigMismatch = errors.New("expset: configuration mismatch")

	// ErrServerVersion means a server is older than expset supports: Redis
	// before 7.0 or Valkey before 7.2 (docs/compatibility.md says why). Open,
	// New and OpenExisting fail with it, naming the server and its version,
	// before any script runs; upgrade the server.
	ErrServerVersion = errors.New("expset: server version too old")

	// ErrInvalidConsumer means a consumer group or consumer name given to
	// Consume is empty or longer than MaxConsumerLen.
	ErrInvalidConsumer = errors.New("expset: invalid consumer group or consumer")

	// ErrNoEvents means an event call was made on a set opened without
	// WithExpiryEvents.
	ErrNoEvents = errors.New("expset: set has no expiry events")

	// ErrNoIndex means a Sweeper was given a set that keeps no due index:
	// one opened without WithExpiryEvents or WithSweepIndex.
	ErrNoIndex = errors.New("expset: set keeps no due index")

	// ErrLeaseLost means a sweeper could not refresh a shard's lease (another
	// sweeper took it, or it lapsed) and stopped sweeping that shard. Run
	// reports it (Hooks.OnError, WithErrorHandler, else log/slog) and carries
	// on with its other shards, trying the lease again every max idle
	// interval.
	ErrLeaseLost = errors.New("expset: sweeper lease lost")

	// ErrHandlerLeaseLost is the context.Cause of a Consume handler's
	// context when its lease on the event was lost: another consumer took
	// the event (this one lost Redis for longer than the visibility
	// timeout), or it was acknowledged elsewhere.
	ErrHandlerLeaseLost = errors.New("expset: handler lease on the event lost")

	// ErrHandlerTimeout is the context.Cause of a Consume handler's context
	// when the call ran for WithMaxHandlingTime.
	ErrHandlerTimeout = errors.New("expset: handler call ran past the maximum handling time")

	// ErrNotOpened means a method was called on a Set, Quota or Sweeper
	// that New, Open, NewQuota or NewSweeper did not make: a zero value or a
	// nil pointer. Nothing was sent to Redis.
	ErrNotOpened = errors.New("expset: not opened")

	// ErrUnexpectedReply means Redis answered a script with a reply of the
	// wrong shape: a bug, or a key written by something else.
	ErrUnexpectedReply = errors.New("expset: unexpected reply")
)
