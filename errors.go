package expset

import (
	"errors"

	"github.com/expset/expset/internal/store"
)

// Sentinel errors. Errors returned by this package wrap one of these with %w
// and name the argument or key involved; match them with errors.Is.
var (
	// ErrNotFound means the member is absent or already expired.
	ErrNotFound = errors.New("expset: member not found")

	// ErrInvalidArgument means an argument or option is out of its range,
	// malformed, or given where it does not apply: a set name, owner,
	// member, ttl (1ms to 100 years), limit, payload, consumer group or
	// consumer name, option, snowflake layout, ID or member, count, shard or
	// stream ID; or a call made on a Set, Quota or Sweeper that Open,
	// NewQuota or NewSweeper did not make (a zero value or a nil pointer),
	// an event call on a set opened without WithExpiryEvents, a Sweeper of a
	// set that keeps no due index. The message names the argument and says
	// what to use instead. Nothing was written.
	ErrInvalidArgument = errors.New("expset: invalid argument")

	// ErrConfigMismatch means the set was first opened with another shard
	// count or other options recorded in Redis; opening it differently would
	// orphan data or lose expiry events. The message shows the recorded
	// options to open it with; WithRecordedConfiguration reads and uses them.
	ErrConfigMismatch = errors.New("expset: configuration mismatch")

	// ErrServerVersion means a server is older than expset supports: Redis
	// before 7.0 or Valkey before 7.2 (docs/compatibility.md says why). Open
	// fails with it, naming the server and its version,
	// before any script runs; upgrade the server.
	ErrServerVersion = errors.New("expset: server version too old")

	// ErrNotDurable means Redis may not keep what the set writes. Open fails
	// with it, naming the server and the fix, when a server's
	// maxmemory-policy may evict the set's keys (any policy but noeviction;
	// WithEvictingServer accepts the risk), or when WithDurability asks for
	// the AOF of a server with appendonly off. With WithDurability, Set.Add
	// returns it beside the deadline it wrote when the acknowledgements did
	// not all come in time: the member is in the set, on the master only.
	ErrNotDurable = errors.New("expset: not durable")

	// ErrLeaseLost means a lease was lost. For a Sweeper: Run found its
	// lease ended (it could not renew it in time) or removed, so other
	// sweepers may have taken its shards meanwhile; it reports it
	// (Hooks.OnError, else log/slog) and carries on under the lease taken
	// anew. For a Consume handler: it is the context.Cause of
	// the handler's context when the consumer lost its lease on the event
	// (another consumer took it after this one lost Redis for longer than
	// the lease TTL, or it was acknowledged elsewhere); stop working on it.
	ErrLeaseLost = errors.New("expset: lease lost")
)

// errUnexpectedReply means Redis answered a script with a reply of the wrong
// shape: a bug, or a key written by something else. It is the store's
// sentinel (store.ErrUnexpectedReply), which the store's readers wrap.
var errUnexpectedReply = store.ErrUnexpectedReply
