package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/expset/expset/internal/store"
)

// Jobs without owners (Set.Put) are members of owners the set makes for
// them, one of a few buckets per shard (internal/store/jobs.go has the
// layout); jobOwnerPrefix starts their names.
const jobOwnerPrefix = store.JobOwnerPrefix

// Job is the state of a job put with Set.Put, as Set.Job reads it.
type Job struct {
	// State is "waiting" (put and not yet handed to a handler: Due says
	// when it is or was due), "running" (a handler call has begun in some
	// consumer group and the job is not finished there: Attempt says
	// which), "dead" (dead-lettered in a group), or "" when no job of that
	// ID (and owner) is known: never put, cancelled, or finished by every
	// group.
	State   string
	Due     time.Time // when the job is or was due (zero when State is "")
	Attempt int       // running: the highest handler call begun over the groups, 1 for the first
}

// WithOwner makes a job call act on the job of owner: Set.Put puts it as
// the member id of owner, in owner's shard and sorted set, with its payload
// beside the owner's; Set.Reschedule, Set.Cancel, Set.Job and
// Set.JobDeadLetters find it there. Default: the job has no owner. A job
// is (owner, ID): the same ID under two owners, or under one and none, is
// two jobs. Its event has Owner owner and Member id, so
// WithOwnerConcurrency caps it, Set.Running counts it, and owner's reads
// (Count, Members, Contains, Deadline, Payload) and a Quota's limit see it
// as a member while it waits; the calls on owner's members (Add, Extend,
// Remove, Acquire) act on it as on any. owner is checked as Set.Add checks
// one: 1 to 1024 bytes, not beginning with "\x00job:"; else the call fails
// with ErrInvalidArgument and changes nothing.
func WithOwner(owner string) JobOption {
	return jobOption(func(c *callConfig) error {
		if p := ownerProblem(owner); p != "" {
			return fmt.Errorf("%w: WithOwner: %s", ErrInvalidArgument, p)
		}
		c.owner, c.hasOwner = owner, true
		return nil
	})
}

// isJobOwner reports whether an event's owner is a bucket of jobs.
func isJobOwner(owner string) bool { return store.IsJobOwner(owner) }

// jobName names job id of owner ("": none) in errors.
func jobName(owner, id string) string {
	if owner == "" {
		return "job " + strconv.Quote(id)
	}
	return "job " + strconv.Quote(id) + " of owner " + strconv.Quote(owner)
}

// scheduleName names schedule id in errors.
func scheduleName(id string) string { return "schedule " + strconv.Quote(id) }

// hideJobOwner returns err, of call op on the job or schedule called what
// (`job "id"`), naming that instead of the key of the owner it is kept
// under, which no caller should see: the cause the store wrapped with the
// key, wrapped anew. Other errors come back as they are.
func hideJobOwner(err error, op, what string) error {
	if err == nil || !strings.Contains(err.Error(), jobOwnerPrefix) {
		return err
	}
	cause := err
	for strings.Contains(cause.Error(), jobOwnerPrefix) && errors.Unwrap(cause) != nil {
		cause = errors.Unwrap(cause)
	}
	return fmt.Errorf("expset: %s %s: %w", op, what, cause)
}

// jobOwner applies the options of one call on a job and returns its owner
// ("": none).
func jobOwner(opts []JobOption) (string, error) {
	var c callConfig
	err := applyOptions(opts, &c, JobOption.applyJob)
	return c.owner, err
}

// checkJob checks a call on job id and, when hasDelay, its delay, which
// it returns in ms.
func (s *Set) checkJob(id string, delay time.Duration, hasDelay bool) (int64, error) {
	if err := s.opened(); err != nil {
		return 0, err
	}
	if !s.events {
		return 0, fmt.Errorf("%w: set %q was opened without WithExpiryEvents: jobs are delivered as expiry events, open it with it", ErrInvalidArgument, s.name)
	}
	if id == "" || len(id) > maxMemberLen {
		return 0, fmt.Errorf("%w: job ID of %d bytes (want 1 to %d)", ErrInvalidArgument, len(id), maxMemberLen)
	}
	if hasDelay && (delay < 0 || delay > maxTTL) {
		return 0, fmt.Errorf("%w: delay %v (want 0 to %v; sub-millisecond parts are dropped)", ErrInvalidArgument, delay, maxTTL)
	}
	return delay.Milliseconds(), nil
}

// Put puts a job with ID id, due after delay, unless a job of that ID is
// waiting already (put and not yet taken by the sweeper, due or not): then
// it changes nothing, and returns that job's due time and false. Put never
// moves a waiting job; Reschedule does. A job's ID spreads it over the
// set's shards. When due, the sweeper turns the job into an expiry event
// that Consume delivers to every consumer group with an empty Owner, the ID
// as Member and the due time as Deadline. delay is 0 (due at once) to 100
// years, truncated to whole milliseconds. A job due at once skips the
// sweeper: Put appends its event to the stream itself and wakes the
// consumers, so it never waits, and Put of its ID again puts another. Options: WithPayload (the set
// needs WithPayloadStorage), WithOwner (the job of an owner: its shard is
// the owner's, its event carries the owner, and "waiting" means a member
// id of the owner). The set needs WithExpiryEvents.
//
// Put is one round trip: one script that costs O(log n) in the jobs of its
// bucket, or in the members of its owner (see docs/jobs.md). It waits for
// WithDurability's acknowledgements as Add does. A Put its client sends
// again after losing the reply (go-redis retries a call after a read
// timeout, and the server may have run both) reports what its first run
// did, by a receipt the call leaves on the server for twice its client's
// retries (see store.Store.JobReceiptMillis); so do Reschedule and Cancel.
// Put is safe for simultaneous use, as every call of a Set is.
func (s *Set) Put(ctx context.Context, id string, delay time.Duration, opts ...PutOption) (time.Time, bool, error) {
	ms, err := s.checkJob(id, delay, true)
	if err != nil {
		return time.Time{}, false, err
	}
	c, err := callOptions(s, opts, PutOption.applyPut)
	if err != nil {
		return time.Time{}, false, err
	}
	due, put, durable, err := s.st.Put(ctx, c.owner, id, ms, c.payload, c.hasPayload)
	if err != nil {
		return time.Time{}, false, hideJobOwner(err, "put", jobName(c.owner, id))
	}
	if dur := s.st.Durable(); put && dur.On() && !durable {
		return due, true, fmt.Errorf("%w: put %s: %s", ErrNotDurable, jobName(c.owner, id), dur.Shortfall())
	}
	return due, put, nil
}

// Reschedule makes the waiting job id due after delay instead (earlier or
// later) and returns its new due time; a job moved to now (delay 0) leaves
// its bucket as its event, written at once as Put writes one due at once,
// and waits no more. A job not waiting (never put, cancelled, or already taken by the
// sweeper) gets an error matching ErrNotFound. delay is 0 to 100 years, as
// for Put. Options: WithOwner (the job of an owner). Reschedule is one
// round trip: one script, O(log n) in the jobs of its bucket (the members
// of its owner).
func (s *Set) Reschedule(ctx context.Context, id string, delay time.Duration, opts ...JobOption) (time.Time, error) {
	ms, err := s.checkJob(id, delay, true)
	if err != nil {
		return time.Time{}, err
	}
	owner, err := jobOwner(opts)
	if err != nil {
		return time.Time{}, err
	}
	due, found, durable, err := s.st.Reschedule(ctx, owner, id, ms)
	if err != nil {
		return time.Time{}, hideJobOwner(err, "reschedule", jobName(owner, id))
	}
	if !found {
		return time.Time{}, fmt.Errorf("%w: %s is not waiting", ErrNotFound, jobName(owner, id))
	}
	if dur := s.st.Durable(); dur.On() && !durable {
		return due, fmt.Errorf("%w: reschedule %s: %s", ErrNotDurable, jobName(owner, id), dur.Shortfall())
	}
	return due, nil
}

// Cancel cancels the job id until a handler call of it begins, and
// reports whether it did: a job waiting, due or not, is deleted with its
// payload; a job whose event the sweeper has written has the event deleted,
// if no consumer group has begun a handler call of it (a call Consume gave
// back as it stopped counts as not begun). A cancelled job is never
// delivered, and Job then reports it unknown. Cancel returns false for a
// job unknown, done, dead, or with a call begun in some group. Only the
// newest put of the ID is cancelled. Options: WithOwner (the job of an
// owner).
//
// A waiting job costs one round trip: one script, O(log n) in the jobs of
// its bucket (the members of its owner). Any other costs one more, and
// looks through its shard's event stream, newest first, in one round trip
// per 1,000 entries it passes (the stream holds the events some group has
// not finished), as Job does.
func (s *Set) Cancel(ctx context.Context, id string, opts ...JobOption) (bool, error) {
	if _, err := s.checkJob(id, 0, false); err != nil {
		return false, err
	}
	owner, err := jobOwner(opts)
	if err != nil {
		return false, err
	}
	ok, err := s.st.Cancel(ctx, owner, id)
	return ok, hideJobOwner(err, "cancel", jobName(owner, id))
}

// Job returns the state of the job id: waiting with its due time, running
// with its attempt, dead, or unknown (State ""). Options: WithOwner (the
// job of an owner). A waiting job costs one round trip (one ZSCORE in a
// script); any other looks through its shard's event stream, then its dead
// letters, newest first, in one round trip per 1,000 entries it passes
// (the stream holds the events some group has not finished; dead letters
// stay until kicked or removed).
func (s *Set) Job(ctx context.Context, id string, opts ...JobOption) (Job, error) {
	if _, err := s.checkJob(id, 0, false); err != nil {
		return Job{}, err
	}
	owner, err := jobOwner(opts)
	if err != nil {
		return Job{}, err
	}
	st, err := s.st.Job(ctx, owner, id)
	return Job(st), hideJobOwner(err, "read", jobName(owner, id))
}
