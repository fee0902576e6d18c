package expset

import (
	"strconv"
	"strings"
	"time"
)

// Rows of the hostile-input table (hostile_test.go): owners and members.

// hostileKeyRows are the rows of owners and members.
func hostileKeyRows(rows *hostileRows) {
	row, huge, long, ok, errIf := rows.row, rows.huge, rows.long, rows.ok, rows.errIf
	// Owners: every call that takes one. The valid ones, however odd, each
	// get their own key (checked after Add) and work like any other.
	owners := []hostileValue{
		{"owner empty", "", false},
		{"owner of 1 MiB", huge, false},
		{"owner of 1025 bytes", long(maxOwnerLen + 1), false},
		{"owner of 1024 bytes (maxOwnerLen)", long(maxOwnerLen), true},
		{"owner beginning with the jobs' `\"\\x00job:\"`", jobOwnerPrefix + "7", false},
		val("\x00\xff\x01", true), val("{a}", true), val("}{", true), val("{}", true),
		val("a:b:", true), val("a\nb", true), val("ü€", true), val("*?[x]", true), val(" ", true),
	}
	for _, o := range owners {
		in, v, good := o.desc, o.v, o.ok
		if strings.HasPrefix(o.desc, "`") {
			in = "owner " + o.desc
		}
		err := errIf(good, ErrInvalidArgument)
		row("Set.Add", in, err, ok(good, "now+1m0s"), func(e *hostileEnv) (string, error) {
			d, err := e.s.Add(e.ctx, v, "m", time.Minute)
			if err == nil {
				err = e.stored(v, "m", d)
			}
			return e.rt(d), err
		})
		row("Set.Contains", in, err, ok(good, "true"), func(e *hostileEnv) (string, error) {
			b, err := e.s.Contains(e.ctx, v, "m")
			return strconv.FormatBool(b), err
		})
		row("Set.Deadline", in, err, ok(good, "now+1m0s"), func(e *hostileEnv) (string, error) {
			d, err := e.s.Deadline(e.ctx, v, "m")
			return e.rt(d), err
		})
		row("Set.Extend", in, err, ok(good, "now+2m0s"), func(e *hostileEnv) (string, error) {
			d, err := e.s.Extend(e.ctx, v, "m", 2*time.Minute)
			return e.rt(d), err
		})
		row("Set.Count", in, err, ok(good, "1"), func(e *hostileEnv) (string, error) {
			n, err := e.s.Count(e.ctx, v)
			return strconv.Itoa(n), err
		})
		row("Set.Members", in, err, ok(good, `"m" until now+2m0s`), func(e *hostileEnv) (string, error) {
			ms, err := e.s.Members(e.ctx, v, 0)
			return e.members(ms), err
		})
		row("Set.Members", in+", n 1", err, ok(good, `"m" until now+2m0s`), func(e *hostileEnv) (string, error) {
			ms, err := e.s.Members(e.ctx, v, 1)
			return e.members(ms), err
		})
		row("Set.Payload", in, err, ok(good, "no payload"), func(e *hostileEnv) (string, error) {
			p, err := e.s.Payload(e.ctx, v, "m")
			if p == nil {
				return "no payload", err
			}
			return strconv.Quote(string(p)), err
		})
		row("Quota.Acquire", in+", member held", err, ok(good, "allowed, existing, count 1 of 3, deadline now+2m0s"), func(e *hostileEnv) (string, error) {
			d, err := e.q.Acquire(e.ctx, v, "m", time.Minute)
			return e.decision(d), err
		})
		row("Quota.Release", in, err, ok(good, "true"), func(e *hostileEnv) (string, error) {
			b, err := e.q.Release(e.ctx, v, "m")
			return strconv.FormatBool(b), err
		})
		row("Set.Remove", in+", member gone", err, ok(good, "0"), func(e *hostileEnv) (string, error) {
			n, err := e.s.Remove(e.ctx, v, "m")
			return strconv.Itoa(n), err
		})
	}

	// Members: every call that takes one, each member under its own owner.
	members := []hostileValue{
		{"member empty", "", false},
		{"member of 1 MiB", huge, false},
		{"member of 1025 bytes", long(maxMemberLen + 1), false},
		{"member of 1024 bytes (maxMemberLen)", long(maxMemberLen), true},
		val("\x00\xff\n", true), val("{m}", true), val("ü€", true), val(" ", true),
	}
	for i, m := range members {
		in, v, good, owner := m.desc, m.v, m.ok, "member-"+strconv.Itoa(i)
		if strings.HasPrefix(m.desc, "`") {
			in = "member " + m.desc
		}
		err := errIf(good, ErrInvalidArgument)
		row("Set.Add", in, err, ok(good, "now+1m0s"), func(e *hostileEnv) (string, error) {
			d, err := e.s.Add(e.ctx, owner, v, time.Minute)
			if err == nil {
				err = e.stored(owner, v, d)
			}
			return e.rt(d), err
		})
		row("Set.Contains", in, err, ok(good, "true"), func(e *hostileEnv) (string, error) {
			b, err := e.s.Contains(e.ctx, owner, v)
			return strconv.FormatBool(b), err
		})
		row("Set.Deadline", in, err, ok(good, "now+1m0s"), func(e *hostileEnv) (string, error) {
			d, err := e.s.Deadline(e.ctx, owner, v)
			return e.rt(d), err
		})
		row("Set.Extend", in, err, ok(good, "now+2m0s"), func(e *hostileEnv) (string, error) {
			d, err := e.s.Extend(e.ctx, owner, v, 2*time.Minute)
			return e.rt(d), err
		})
		row("Set.Payload", in, err, ok(good, "no payload"), func(e *hostileEnv) (string, error) {
			p, err := e.s.Payload(e.ctx, owner, v)
			if p == nil {
				return "no payload", err
			}
			return strconv.Quote(string(p)), err
		})
		row("Quota.Acquire", in+", held", err, ok(good, "allowed, existing, count 1 of 3, deadline now+2m0s"), func(e *hostileEnv) (string, error) {
			d, err := e.q.Acquire(e.ctx, owner, v, time.Minute)
			return e.decision(d), err
		})
		row("Quota.Release", in, err, ok(good, "true"), func(e *hostileEnv) (string, error) {
			b, err := e.q.Release(e.ctx, owner, v)
			return strconv.FormatBool(b), err
		})
		row("Set.Remove", in+", among valid ones", err, ok(good, "0"), func(e *hostileEnv) (string, error) {
			n, err := e.s.Remove(e.ctx, owner, "a", v, "b")
			return strconv.Itoa(n), err
		})
	}
}
