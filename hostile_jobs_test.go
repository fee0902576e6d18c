package expset

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// hostileJobCases are the rows of the jobs' calls (Set.Put, Reschedule,
// Cancel, Job). They run on a set of their own, with expiry events and
// payloads, on the env's clock; a rejected row checks here that the set is
// as it was.
func hostileJobCases() []hostileCase {
	var cs []hostileCase
	// jobs returns the rows' set, holding the job "waiting", due in a
	// minute (a Put that, repeated, changes nothing). Its keys lose their
	// TTLs (the receipts of the calls that wrote: at least 10s), so that
	// none expires between a row's two looks.
	jobs := func(e *hostileEnv) *Set {
		s := must[*Set](e.t)(Open(context.Background(), e.rdb, e.named("jobs"), WithClock(e.clk.Now), WithExpiryEvents(), WithPayloadStorage()))
		if _, _, err := s.Put(e.ctx, "waiting", time.Minute); err != nil {
			e.t.Fatal(err)
		}
		pipe := e.rdb.Pipeline()
		for _, k := range setKeys(e.t, e.rdb, s.Name()) {
			pipe.Persist(e.ctx, k)
		}
		if _, err := pipe.Exec(e.ctx); err != nil && err != redis.Nil {
			e.t.Fatal(err)
		}
		return s
	}
	row := func(call, input string, want error, got string, run func(e *hostileEnv, s *Set) (string, error)) {
		cs = append(cs, hostileCase{call: call, input: input, want: want, got: got, run: func(e *hostileEnv) (string, error) {
			s := jobs(e)
			before := snapshot(e.t, e.rdb, s.Name())
			out, err := run(e, s)
			if want != nil && !reflect.DeepEqual(before, snapshot(e.t, e.rdb, s.Name())) {
				return out, fmt.Errorf("rejected (%w), but changed the jobs", err)
			}
			return out, err
		}})
	}
	put := func(e *hostileEnv, s *Set, id string, delay time.Duration, opts ...PutOption) (string, error) {
		d, put, err := s.Put(e.ctx, id, delay, opts...)
		return fmt.Sprintf("%s, %v", e.rt(d), put), err
	}
	long := strings.Repeat("j", maxMemberLen+1)
	huge := strings.Repeat("j", 1<<20)
	for _, id := range []struct{ desc, id string }{{"ID empty", ""}, {"ID of 1025 bytes", long}, {"ID of 1 MiB", huge}} {
		row("Set.Put", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) { return put(e, s, id.id, time.Minute) })
		row("Set.Reschedule", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
			_, err := s.Reschedule(e.ctx, id.id, time.Minute)
			return "", err
		})
		row("Set.Cancel", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
			_, err := s.Cancel(e.ctx, id.id)
			return "", err
		})
		row("Set.Job", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
			_, err := s.Job(e.ctx, id.id)
			return "", err
		})
		row("Set.JobDeadLetters", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
			_, err := s.JobDeadLetters(e.ctx, id.id)
			return "", err
		})
	}
	for _, d := range []struct {
		desc  string
		delay time.Duration
	}{{"delay -1ns", -1}, {"delay -1s", -time.Second}, {"delay math.MinInt64", math.MinInt64}, {"delay maxTTL+1ms", maxTTL + time.Millisecond}, {"delay math.MaxInt64", math.MaxInt64}} {
		row("Set.Put", d.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) { return put(e, s, "j", d.delay) })
		row("Set.Reschedule", d.desc+", job waiting", ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
			_, err := s.Reschedule(e.ctx, "waiting", d.delay)
			return "", err
		})
	}
	row("Set.Put", "WithPayload of maxPayloadLen+1 bytes", ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
		return put(e, s, "j", time.Minute, WithPayload(make([]byte, maxPayloadLen+1)))
	})
	row("Set.Put", "a set without WithExpiryEvents", ErrInvalidArgument, "", func(e *hostileEnv, _ *Set) (string, error) { return put(e, e.s, "j", time.Minute) })
	row("Set.Reschedule", "a set without WithExpiryEvents", ErrInvalidArgument, "", func(e *hostileEnv, _ *Set) (string, error) {
		_, err := e.s.Reschedule(e.ctx, "j", time.Minute)
		return "", err
	})
	row("Set.Cancel", "a set without WithExpiryEvents", ErrInvalidArgument, "", func(e *hostileEnv, _ *Set) (string, error) {
		_, err := e.s.Cancel(e.ctx, "j")
		return "", err
	})
	row("Set.Job", "a set without WithExpiryEvents", ErrInvalidArgument, "", func(e *hostileEnv, _ *Set) (string, error) {
		_, err := e.s.Job(e.ctx, "j")
		return "", err
	})
	row("Set.JobDeadLetters", "a set without WithExpiryEvents", ErrInvalidArgument, "", func(e *hostileEnv, _ *Set) (string, error) {
		_, err := e.s.JobDeadLetters(e.ctx, "j")
		return "", err
	})
	row("Set.Put", "WithPayload on a set WithExpiryEvents without WithPayloadStorage", ErrInvalidArgument, "", func(e *hostileEnv, _ *Set) (string, error) {
		s := must[*Set](e.t)(Open(context.Background(), e.rdb, e.named("groups"), WithExpiryEvents()))
		return put(e, s, "j", time.Minute, WithPayload([]byte("p")))
	})
	row("Set.Put", "delay 0, ID of 1024 bytes, a nil option", nil, "now+0s, true", func(e *hostileEnv, s *Set) (string, error) {
		return put(e, s, long[:maxMemberLen], 0, nil)
	})
	row("Set.Put", "delay maxTTL (100 years), ID `\"\\x00\\xff{}\"`, WithPayload of maxPayloadLen bytes", nil, "now+876000h0m0s, true", func(e *hostileEnv, s *Set) (string, error) {
		return put(e, s, "\x00\xff{}", maxTTL, WithPayload(make([]byte, maxPayloadLen)))
	})
	row("Set.Put", "delay 1.5ms (truncated), then again with 1h: kept", nil, "now+1ms, true; now+1ms, false", func(e *hostileEnv, s *Set) (string, error) {
		a, err := put(e, s, "twice", 1500*time.Microsecond)
		if err != nil {
			return a, err
		}
		b, err := put(e, s, "twice", time.Hour)
		return a + "; " + b, err
	})
	row("Set.Reschedule", "a job never put", ErrNotFound, "", func(e *hostileEnv, s *Set) (string, error) {
		_, err := s.Reschedule(e.ctx, "never", time.Minute)
		return "", err
	})
	row("Set.Reschedule", "delay 0, job waiting (due at once)", nil, "now+0s", func(e *hostileEnv, s *Set) (string, error) {
		if _, err := put(e, s, "soon", time.Minute); err != nil {
			return "", err
		}
		d, err := s.Reschedule(e.ctx, "soon", 0)
		return e.rt(d), err
	})
	row("Set.Cancel", "a job never put", nil, "false", func(e *hostileEnv, s *Set) (string, error) {
		ok, err := s.Cancel(e.ctx, "never")
		return fmt.Sprint(ok), err
	})
	row("Set.Job", "a job never put", nil, `State ""`, func(e *hostileEnv, s *Set) (string, error) {
		j, err := s.Job(e.ctx, "never")
		return fmt.Sprintf("State %q", j.State), err
	})
	row("Set.JobDeadLetters", "a job never put", nil, "none", func(e *hostileEnv, s *Set) (string, error) {
		ds, err := s.JobDeadLetters(e.ctx, "never")
		if len(ds) > 0 {
			return fmt.Sprint(ds), err
		}
		return "none", err
	})
	zeroCalls := []struct {
		call string
		run  func(e *hostileEnv, s *Set) error
	}{
		{"Set.Put", func(e *hostileEnv, s *Set) error { _, _, err := s.Put(e.ctx, "j", time.Minute); return err }},
		{"Set.Reschedule", func(e *hostileEnv, s *Set) error { _, err := s.Reschedule(e.ctx, "j", time.Minute); return err }},
		{"Set.Cancel", func(e *hostileEnv, s *Set) error { _, err := s.Cancel(e.ctx, "j"); return err }},
		{"Set.Job", func(e *hostileEnv, s *Set) error { _, err := s.Job(e.ctx, "j"); return err }},
		{"Set.JobDeadLetters", func(e *hostileEnv, s *Set) error { _, err := s.JobDeadLetters(e.ctx, "j"); return err }},
	}
	for _, z := range []struct {
		desc string
		s    *Set
	}{{"zero Set", &Set{}}, {"nil *Set", nil}} {
		for _, c := range zeroCalls {
			zs, run := z.s, c.run
			row(c.call, z.desc, ErrInvalidArgument, "", func(e *hostileEnv, _ *Set) (string, error) { return "", run(e, zs) })
		}
	}
	return cs
}
