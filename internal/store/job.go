package store

import (
	"context"
	"time"
)

// job.go serves job.lua: Set.Job's look for a job's state.

// JobState is job.lua's answer: State "waiting", "running", "dead" or ""
// (unknown or done), with the due time and, running, the attempt.
type JobState struct {
	State   string
	Due     time.Time
	Attempt int
}

// jobCall builds job.lua's call on job id of owner ("": none) from where
// ("", or a cursor it returned).
func (s *Store) jobCall(owner, id, where string) *Call {
	shard, owner, keys := s.jobKeys(owner, id)
	sk := &s.shards[shard]
	return &Call{Op: "job", Shard: shard, Script: scriptJob, Keys: []string{keys[0], sk.Events, sk.Dead, sk.Att},
		Args: []any{id, owner, where, JobScanCount}}
}

// readJob reads job.lua's reply: {1, due} waiting, {2, due, attempt}
// running, {3, due} dead, {0} unknown, or {4, cursor} to call again from
// cursor (more).
func readJob(v any) (st JobState, cursor string, more bool, err error) {
	xs, ok := v.([]any)
	if !ok || len(xs) == 0 {
		return JobState{}, "", false, Unexpected("job.lua", v)
	}
	kind, ok := Int64(xs[0])
	if !ok {
		return JobState{}, "", false, Unexpected("job.lua", v)
	}
	var due, attempt int64
	if kind >= 1 && kind <= 3 {
		if len(xs) < 2 {
			return JobState{}, "", false, Unexpected("job.lua", v)
		}
		if due, ok = Int64(xs[1]); !ok {
			return JobState{}, "", false, Unexpected("job.lua", v)
		}
	}
	switch {
	case kind == 0 && len(xs) == 1:
		return JobState{}, "", false, nil
	case kind == 1 && len(xs) == 2:
		return JobState{State: "waiting", Due: msTime(due)}, "", false, nil
	case kind == 2 && len(xs) == 3:
		if attempt, ok = Int64(xs[2]); !ok {
			return JobState{}, "", false, Unexpected("job.lua", v)
		}
		return JobState{State: "running", Due: msTime(due), Attempt: int(attempt)}, "", false, nil
	case kind == 3 && len(xs) == 2:
		return JobState{State: "dead", Due: msTime(due)}, "", false, nil
	case kind == 4 && len(xs) == 2:
		if cursor, ok = String(xs[1]); ok {
			return JobState{}, cursor, true, nil
		}
	}
	return JobState{}, "", false, Unexpected("job.lua", v)
}

// Job runs job.lua on job id of owner ("": none) until it answers.
func (s *Store) Job(ctx context.Context, owner, id string) (JobState, error) {
	where := ""
	for {
		v, err := s.run(ctx, s.jobCall(owner, id, where))
		if err != nil {
			return JobState{}, err
		}
		st, cursor, more, err := readJob(v)
		if err != nil || !more {
			return st, err
		}
		where = cursor
	}
}
