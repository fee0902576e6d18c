package expset

import (
	"context"
	"fmt"
	"reflect"
	"strings"
)

// hostileScheduleCases are the rows of the schedules' calls (Set.PutSchedule,
// RemoveSchedule, PauseSchedule, ResumeSchedule, Schedules). They run on a
// set of their own, with expiry events, on the env's clock, holding the
// schedule "s" (@every 1m); a rejected row checks here that the set is as
// it was.
func hostileScheduleCases() []hostileCase {
	var cs []hostileCase
	row := func(call, input string, want error, got string, run func(e *hostileEnv, s *Set) (string, error)) {
		cs = append(cs, hostileCase{call: call, input: input, want: want, got: got, run: func(e *hostileEnv) (string, error) {
			s := must[*Set](e.t)(Open(context.Background(), e.rdb, e.named("schedules"), WithClock(e.clk.Now), WithExpiryEvents()))
			if _, err := s.PutSchedule(e.ctx, "s", "@every 1m"); err != nil {
				e.t.Fatal(err)
			}
			before := snapshot(e.t, e.rdb, s.Name())
			out, err := run(e, s)
			if want != nil && !reflect.DeepEqual(before, snapshot(e.t, e.rdb, s.Name())) {
				return out, fmt.Errorf("rejected (%w), but changed the schedules", err)
			}
			return out, err
		}})
	}
	put := func(e *hostileEnv, s *Set, id, spec string, opts ...ScheduleOption) (string, error) {
		next, err := s.PutSchedule(e.ctx, id, spec, opts...)
		return e.rt(next), err
	}
	long := strings.Repeat("s", maxMemberLen+1)
	for _, id := range []struct{ desc, id string }{{"schedule ID empty", ""}, {"schedule ID of 1025 bytes", long}} {
		row("Set.PutSchedule", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) { return put(e, s, id.id, "@every 1m") })
		row("Set.RemoveSchedule", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
			_, err := s.RemoveSchedule(e.ctx, id.id)
			return "", err
		})
		row("Set.PauseSchedule", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) { return "", s.PauseSchedule(e.ctx, id.id) })
		row("Set.ResumeSchedule", id.desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
			_, err := s.ResumeSchedule(e.ctx, id.id)
			return "", err
		})
	}
	for _, spec := range []string{"", "61 * * * *", "* * * *", "0 0 * * * *", "@every 0.5x", "CRON_TZ=Mars/Olympus 0 * * * *", "0 0 30 2 *", strings.Repeat("*", maxSpecLen+1)} {
		desc := fmt.Sprintf("spec `%q`", spec)
		if len(spec) > maxSpecLen {
			desc = "spec of 257 bytes"
		}
		row("Set.PutSchedule", desc, ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) { return put(e, s, "s", spec) })
	}
	for _, n := range []int{-2, maxCatchUp + 1} {
		row("Set.PutSchedule", fmt.Sprintf("WithCatchUp(%d)", n), ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
			return put(e, s, "s", "@every 1m", WithCatchUp(n))
		})
	}
	row("Set.PutSchedule", "WithPayload of maxPayloadLen+1 bytes", ErrInvalidArgument, "", func(e *hostileEnv, s *Set) (string, error) {
		return put(e, s, "s", "@every 1m", WithPayload(make([]byte, maxPayloadLen+1)))
	})
	row("Set.PutSchedule", "a set without WithExpiryEvents", ErrInvalidArgument, "", func(e *hostileEnv, _ *Set) (string, error) { return put(e, e.s, "s", "@every 1m") })
	row("Set.PutSchedule", "`@every 1s`, ID `\"\\x00\\xff{}\"`, WithCatchUp(-1), WithPayload of maxPayloadLen bytes, a nil option", nil, "now+1s", func(e *hostileEnv, s *Set) (string, error) {
		return put(e, s, "\x00\xff{}", "@every 1s", WithCatchUp(-1), WithPayload(make([]byte, maxPayloadLen)), nil)
	})
	row("Set.PauseSchedule", "a schedule never put", ErrNotFound, "", func(e *hostileEnv, s *Set) (string, error) { return "", s.PauseSchedule(e.ctx, "never") })
	row("Set.ResumeSchedule", "a schedule never put", ErrNotFound, "", func(e *hostileEnv, s *Set) (string, error) {
		_, err := s.ResumeSchedule(e.ctx, "never")
		return "", err
	})
	row("Set.RemoveSchedule", "a schedule never put", nil, "false", func(e *hostileEnv, s *Set) (string, error) {
		ok, err := s.RemoveSchedule(e.ctx, "never")
		return fmt.Sprint(ok), err
	})
	zeroCalls := []struct {
		call string
		run  func(e *hostileEnv, s *Set) error
	}{
		{"Set.PutSchedule", func(e *hostileEnv, s *Set) error { _, err := s.PutSchedule(e.ctx, "s", "@every 1m"); return err }},
		{"Set.RemoveSchedule", func(e *hostileEnv, s *Set) error { _, err := s.RemoveSchedule(e.ctx, "s"); return err }},
		{"Set.PauseSchedule", func(e *hostileEnv, s *Set) error { return s.PauseSchedule(e.ctx, "s") }},
		{"Set.ResumeSchedule", func(e *hostileEnv, s *Set) error { _, err := s.ResumeSchedule(e.ctx, "s"); return err }},
		{"Set.Schedules", func(e *hostileEnv, s *Set) error { _, err := s.Schedules(e.ctx); return err }},
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
