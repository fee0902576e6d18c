package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// AcquireRequest is one Acquire of a batch given to Quota.AcquireMany: the
// same owner, member, ttl and call options Acquire takes.
type AcquireRequest struct {
	Owner   string
	Member  string
	TTL     time.Duration
	Options []CallOption
}

// BatchError reports the requests of a batch that failed in Redis. Errs has
// one entry per request, in order: nil where the request succeeded (its
// Decision is valid), the request's error where it failed (its Decision is
// the zero Decision: not allowed). errors.Is and errors.As see every non-nil
// entry, so errors.Is(err, ErrUnexpectedReply) or a network error match.
type BatchError struct {
	Errs []error
}

// Error lists the failed requests by index, the first few in full.
func (e *BatchError) Error() string {
	var b strings.Builder
	failed := 0
	for i, err := range e.Errs {
		if err == nil {
			continue
		}
		failed++
		if failed <= 3 {
			if failed > 1 {
				b.WriteString("; ")
			}
			b.WriteString("#" + strconv.Itoa(i) + ": " + err.Error())
		}
	}
	if failed > 3 {
		b.WriteString("; and " + strconv.Itoa(failed-3) + " more")
	}
	return "expset: " + strconv.Itoa(failed) + " of " + strconv.Itoa(len(e.Errs)) + " requests failed: " + b.String()
}

// Unwrap returns the errors of the failed requests.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// AcquireMany runs many Acquires in one round trip (one per node on Redis
// Cluster): a pipeline of the same script Acquire runs, one per request, so
// each request is as atomic as an Acquire and the batch as a whole is not.
// Requests for one owner run in the order given; a batch may hold several
// requests for one owner ("a", then "b" and "c" at a limit of 2 admits a and
// b and denies c).
//
// Every request is validated first: a bad one fails the whole call with an
// error that names its index and wraps the sentinel (ErrInvalidOwner,
// ErrInvalidTTL, ...), and nothing is sent. Otherwise AcquireMany returns one
// Decision per request, in order. When some requests fail in Redis (a
// network error, a key of another type), it still returns every Decision
// together with a *BatchError saying which failed; the others took effect.
// An empty batch returns (nil, nil) without a round trip.
//
// When the server's script cache was flushed, the requests that got NOSCRIPT
// did not run: the script is loaded (on every master of a cluster) and they
// are sent once more.
func (q *Quota) AcquireMany(ctx context.Context, reqs []AcquireRequest) ([]Decision, error) {
	if err := q.opened(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	calls := make([]acquireCall, len(reqs))
	for i, r := range reqs {
		c, err := q.prepare(r.Owner, r.Member, r.TTL, r.Options)
		if err != nil {
			return nil, fmt.Errorf("expset: AcquireMany request #%d: %w", i, err)
		}
		calls[i] = c
	}
	cmds := q.set.pipelineAcquire(ctx, calls)
	var retry []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		if err := scriptAcquire.Load(ctx, q.set.rdb).Err(); err != nil {
			for _, i := range retry {
				cmds[i].SetErr(fmt.Errorf("load acquire.lua after NOSCRIPT: %w", err))
			}
		} else {
			sub := make([]acquireCall, len(retry))
			for j, i := range retry {
				sub[j] = calls[i]
			}
			again := q.set.pipelineAcquire(ctx, sub)
			for j, i := range retry {
				cmds[i] = again[j]
			}
		}
	}

	out := make([]Decision, len(reqs))
	var errs []error
	for i, cmd := range cmds {
		d, err := q.set.decisionOf(ctx, cmd, calls[i])
		if err != nil {
			if errs == nil {
				errs = make([]error, len(reqs))
			}
			errs[i] = err
			continue
		}
		out[i] = d
	}
	if errs != nil {
		return out, &BatchError{Errs: errs}
	}
	return out, nil
}

// pipelineAcquire sends the acquire script for each call in one pipeline
// and returns one command per call. The pipeline's own error is only the
// first command's, so callers read each command's.
func (s *Set) pipelineAcquire(ctx context.Context, calls []acquireCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	var start time.Time
	if s.hooks.OnCall != nil {
		start = time.Now()
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = scriptAcquire.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	if s.hooks.OnCall != nil {
		s.hooks.OnCall(ctx, CallInfo{Set: s.name, Op: "acquire-many", Shard: -1, Duration: time.Since(start), Err: err})
	}
	return cmds
}

func (s *Set) decisionOf(ctx context.Context, cmd *redis.Cmd, c acquireCall) (Decision, error) {
	v, err := cmd.Result()
	if err != nil {
		return Decision{}, fmt.Errorf("expset: acquire %s: %w", c.keys[0], err)
	}
	return s.decided(ctx, c, v)
}

// isNoScript reports whether err means the server does not have the script
// cached (EVALSHA was refused and the script did not run).
func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
