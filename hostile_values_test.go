package expset

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Rows of the hostile-input table (hostile_test.go): ttls, limits and
// payloads.

// hostileValueRows are the rows of ttls, limits and payloads.
func hostileValueRows(rows *hostileRows) {
	row, errIf, ok := rows.row, rows.errIf, rows.ok
	// ttls: truncated to whole milliseconds, 1ms to 100 years.
	ttls := []struct {
		desc string
		d    time.Duration
		got  string // the deadline now+ttl, "" when rejected
	}{
		{"ttl 0", 0, ""},
		{"ttl -1ns", -1, ""},
		{"ttl -1s", -time.Second, ""},
		{"ttl math.MinInt64", math.MinInt64, ""},
		{"ttl 999µs", 999 * time.Microsecond, ""},
		{"ttl 1ms", time.Millisecond, "now+1ms"},
		{"ttl 1.5ms (truncated)", 1500 * time.Microsecond, "now+1ms"},
		{"ttl maxTTL (100 years)", maxTTL, "now+876000h0m0s"},
		{"ttl maxTTL+1ns", maxTTL + 1, ""},
		{"ttl maxTTL+1ms", maxTTL + time.Millisecond, ""},
		{"ttl math.MaxInt64", math.MaxInt64, ""},
	}
	for i, tt := range ttls {
		d, good := tt.d, tt.got != ""
		err := errIf(good, ErrInvalidArgument)
		row("Set.Add", tt.desc, err, tt.got, func(e *hostileEnv) (string, error) {
			dl, err := e.s.Add(e.ctx, "ttl", "m", d)
			e.settle("ttl", d)
			return e.rt(dl), err
		})
		// The member extended holds now+1h: Extend never shortens it.
		extended := map[string]string{"now+1ms": "now+1h0m0s", "now+876000h0m0s": "now+876000h0m0s"}[tt.got]
		row("Set.Extend", tt.desc+", member held for 1h", err, extended, func(e *hostileEnv) (string, error) {
			dl, err := e.s.Extend(e.ctx, "ttl-extend", "x", d)
			return e.rt(dl), err
		})
		owner := "ttl-" + strconv.Itoa(i)
		row("Quota.Acquire", tt.desc, err, ok(good, "allowed, count 1 of 3, deadline "+tt.got), func(e *hostileEnv) (string, error) {
			dec, err := e.q.Acquire(e.ctx, owner, "m", d)
			e.settle(owner, d)
			return e.decision(dec), err
		})
	}

	// Limits: 1 to maxLimit, for NewQuota and per call with WithLimit.
	limits := []struct {
		desc string
		n    int
		good bool
	}{
		{"math.MinInt", math.MinInt, false}, {"-1", -1, false}, {"0", 0, false}, {"1", 1, true},
		{"maxLimit (2^30)", maxLimit, true}, {"maxLimit+1", maxLimit + 1, false}, {"math.MaxInt", math.MaxInt, false},
	}
	for i, l := range limits {
		n, good := l.n, l.good
		err := errIf(good, ErrInvalidArgument)
		row("NewQuota", "limit "+l.desc, err, ok(good, "limit "+strconv.Itoa(n)), func(e *hostileEnv) (string, error) {
			q, err := NewQuota(e.s, n)
			if err != nil {
				return "", err
			}
			return "limit " + strconv.Itoa(q.limit), nil
		})
		owner := "limit-" + strconv.Itoa(i)
		row("Quota.Acquire", "WithLimit("+l.desc+")", err, ok(good, fmt.Sprintf("allowed, count 1 of %d, deadline now+1m0s", n)), func(e *hostileEnv) (string, error) {
			d, err := e.q.Acquire(e.ctx, owner, "m", time.Minute, WithLimit(n))
			return e.decision(d), err
		})
	}
	row("Set.Members", "n -1 (all)", nil, `"m" until now+1m0s`, func(e *hostileEnv) (string, error) {
		ms, err := e.s.Members(e.ctx, "base", -1)
		return e.members(ms), err
	})
	row("Set.Members", "n math.MaxInt", nil, `"m" until now+1m0s`, func(e *hostileEnv) (string, error) {
		ms, err := e.s.Members(e.ctx, "base", math.MaxInt)
		return e.members(ms), err
	})
	row("Set.Remove", "no members", nil, "0", func(e *hostileEnv) (string, error) {
		n, err := e.s.Remove(e.ctx, "base")
		return strconv.Itoa(n), err
	})
	row("Set.Remove", "1001 members absent (two batches)", nil, "0", func(e *hostileEnv) (string, error) {
		ms := make([]string, 1001)
		for i := range ms {
			ms[i] = "absent-" + strconv.Itoa(i)
		}
		n, err := e.s.Remove(e.ctx, "base", ms...)
		return strconv.Itoa(n), err
	})

	// Payloads.
	row("Set.Add", "WithPayload on a set without WithPayloadStorage", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.plain.Add(e.ctx, "u", "m", time.Minute, WithPayload([]byte("p")))
		return "", err
	})
	row("Quota.Acquire", "WithPayload on a set without WithPayloadStorage", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		q := must[*Quota](e.t)(NewQuota(e.plain, 3))
		_, err := q.Acquire(e.ctx, "u", "m", time.Minute, WithPayload([]byte("p")))
		return "", err
	})
	row("Set.Add", "WithPayload of maxPayloadLen+1 bytes", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.s.Add(e.ctx, "u", "m", time.Minute, WithPayload(make([]byte, maxPayloadLen+1)))
		return "", err
	})
	row("Quota.Acquire", "WithPayload of maxPayloadLen+1 bytes", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.Acquire(e.ctx, "u", "m", time.Minute, WithPayload(make([]byte, maxPayloadLen+1)))
		return "", err
	})
	row("Set.Add", "WithPayload of maxPayloadLen (1 MiB) bytes", nil, "now+1m0s, payload of 1048576 bytes", func(e *hostileEnv) (string, error) {
		d, err := e.s.Add(e.ctx, "payload", "big", time.Minute, WithPayload(make([]byte, maxPayloadLen)))
		if err != nil {
			return "", err
		}
		p, err := e.s.Payload(e.ctx, "payload", "big")
		return fmt.Sprintf("%s, payload of %d bytes", e.rt(d), len(p)), err
	})
	row("Quota.Acquire", "WithPayload of binary bytes", nil, `allowed, count 1 of 3, deadline now+1m0s, payload "\x00\xff"`, func(e *hostileEnv) (string, error) {
		d, err := e.q.Acquire(e.ctx, "payload-bin", "m", time.Minute, WithPayload([]byte{0, 0xff}))
		if err != nil {
			return "", err
		}
		p, err := e.s.Payload(e.ctx, "payload-bin", "m")
		return e.decision(d) + ", payload " + strconv.Quote(string(p)), err
	})
}
