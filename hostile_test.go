package expset

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var updateHostileDoc = flag.Bool("update-hostile-doc", false, "rewrite docs/hostile-input.md from the table in hostile_test.go")

const hostileDocPath = "docs/hostile-input.md"

// hostileCase is one row of the hostile-input table: a public call, what
// makes its input hostile, and what the call must give: the sentinel error,
// or (want nil) success with the result that run renders.
type hostileCase struct {
	call  string
	input string // markdown
	want  error
	got   string // on success: run's rendering of the result
	run   func(e *hostileEnv) (string, error)
	name  string // for Open: the name whose meta key a rejection must not create
}

// hostileEnv is what the rows run against: a set with payloads and a
// quota of 3 on it, a set without payloads, and a clock that never moves,
// so results render as offsets from it.
type hostileEnv struct {
	t     testing.TB
	ctx   context.Context
	rdb   redis.UniversalClient
	clk   *fakeClock
	s     *Set   // WithPayloadStorage
	plain *Set   // without
	q     *Quota // limit 3 on s
	keys  map[string]string
	names map[string]string
}

// rt renders a time as an offset from the env's clock.
func (e *hostileEnv) rt(t time.Time) string {
	if t.IsZero() {
		return "zero time"
	}
	return "now+" + t.Sub(e.clk.Now()).String()
}

func (e *hostileEnv) decision(d Decision) string {
	out := "denied"
	if d.Allowed {
		out = "allowed"
	}
	if d.Existing {
		out += ", existing"
	}
	out += fmt.Sprintf(", count %d of %d", d.Count, d.Limit)
	if d.Allowed {
		out += ", deadline " + e.rt(d.Deadline)
	} else {
		out += ", retry after " + d.RetryAfter.String()
	}
	if len(d.Evicted) > 0 {
		out += fmt.Sprintf(", evicted %q", d.Evicted)
	}
	return out
}

func (e *hostileEnv) members(ms []Member) string {
	var parts []string
	for _, m := range ms {
		parts = append(parts, strconv.Quote(m.ID)+" until "+e.rt(m.Deadline))
	}
	if parts == nil {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// named returns a fresh valid set name ending in suffix, the same for the
// same suffix, whose keys are deleted when the test ends.
func (e *hostileEnv) named(suffix string) string {
	if n, ok := e.names[suffix]; ok {
		return n
	}
	n := uniqueName(e.t, e.rdb)
	n += suffix[:min(len(suffix), maxNameLen-len(n))]
	e.t.Cleanup(func() {
		for _, k := range setKeys(e.t, e.rdb, n) {
			e.rdb.Del(context.Background(), k)
		}
	})
	e.names[suffix] = n
	return n
}

// stored checks that Add put member into owner's own key: the key holds it
// with the deadline, and no other owner of the table uses that key.
func (e *hostileEnv) stored(owner, member string, d time.Time) error {
	k := e.s.OwnerKey(owner)
	if prev, ok := e.keys[k]; ok && prev != owner {
		return fmt.Errorf("owners %q and %q share key %q", prev, owner, k)
	}
	e.keys[k] = owner
	score, err := e.rdb.ZScore(e.ctx, k, member).Result()
	if err != nil || int64(score) != d.UnixMilli() {
		return fmt.Errorf("key %q holds %v (%v) for the member, want %d", k, int64(score), err, d.UnixMilli())
	}
	return nil
}

// settle removes owner's member "m" after a successful call with a ttl
// under a second: on a real server its key would expire on the server's
// clock while later rows compare snapshots.
func (e *hostileEnv) settle(owner string, ttl time.Duration) {
	if ttl >= time.Millisecond && ttl < time.Second {
		if _, err := e.s.Remove(e.ctx, owner, "m"); err != nil {
			e.t.Fatalf("removing the short-lived member of %q: %v", owner, err)
		}
	}
}

type hostileValue struct {
	desc string
	v    string
	ok   bool
}

func quoted(v string) string { return "`" + strconv.Quote(v) + "`" }

func val(v string, ok bool) hostileValue { return hostileValue{quoted(v), v, ok} }

func hostileCases() []hostileCase {
	var cs []hostileCase
	row := func(call, input string, want error, got string, run func(e *hostileEnv) (string, error)) {
		cs = append(cs, hostileCase{call: call, input: input, want: want, got: got, run: run})
	}
	huge := strings.Repeat("x", 1<<20)
	long := func(n int) string { return strings.Repeat("x", n) }
	ok := func(b bool, s string) string {
		if b {
			return s
		}
		return ""
	}
	errIf := func(b bool, err error) error {
		if b {
			return nil
		}
		return err
	}

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

	// nil options and clients.
	row("Set.Add", "a nil option", nil, "now+1m0s", func(e *hostileEnv) (string, error) {
		d, err := e.s.Add(e.ctx, "nil-option", "m", time.Minute, nil)
		return e.rt(d), err
	})
	row("Quota.Acquire", "a nil option", nil, "allowed, count 1 of 3, deadline now+1m0s", func(e *hostileEnv) (string, error) {
		d, err := e.q.Acquire(e.ctx, "nil-option-q", "m", time.Minute, nil)
		return e.decision(d), err
	})
	// Quota.AcquireWait checks its input as Acquire does, before it joins
	// any line; with room it is admitted at once, like Acquire.
	row("Quota.AcquireWait", "owner empty", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "", "m", time.Minute)
		return "", err
	})
	row("Quota.AcquireWait", "owner of 1025 bytes", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, long(maxOwnerLen+1), "m", time.Minute)
		return "", err
	})
	row("Quota.AcquireWait", "member empty", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "", time.Minute)
		return "", err
	})
	row("Quota.AcquireWait", "member of 1 MiB", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", huge, time.Minute)
		return "", err
	})
	row("Quota.AcquireWait", "ttl 0", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", 0)
		return "", err
	})
	row("Quota.AcquireWait", "ttl -1ns", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", -1)
		return "", err
	})
	row("Quota.AcquireWait", "ttl math.MaxInt64", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", math.MaxInt64)
		return "", err
	})
	row("Quota.AcquireWait", "WithLimit(0)", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", time.Minute, WithLimit(0))
		return "", err
	})
	row("Quota.AcquireWait", "WithLimit(maxLimit+1)", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", time.Minute, WithLimit(maxLimit+1))
		return "", err
	})
	row("Quota.AcquireWait", "WithPayload on a set without WithPayloadStorage", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		q := must[*Quota](e.t)(NewQuota(e.plain, 3))
		_, err := q.AcquireWait(e.ctx, "u", "m", time.Minute, WithPayload([]byte("p")))
		return "", err
	})
	row("Quota.AcquireWait", "WithPayload of maxPayloadLen+1 bytes", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.q.AcquireWait(e.ctx, "u", "m", time.Minute, WithPayload(make([]byte, maxPayloadLen+1)))
		return "", err
	})
	row("Quota.AcquireWait", "owner `\"\\x00\\xff{}\"`, a nil option, room", nil, "allowed, count 1 of 3, deadline now+1m0s", func(e *hostileEnv) (string, error) {
		d, err := e.q.AcquireWait(e.ctx, "\x00\xff{}", "m", time.Minute, nil)
		return e.decision(d), err
	})
	row("NewQuota", "a nil option", nil, "limit 3", func(e *hostileEnv) (string, error) {
		q, err := NewQuota(e.s, 3, nil)
		if err != nil {
			return "", err
		}
		return "limit " + strconv.Itoa(q.limit), nil
	})
	row("NewQuota", "nil Set", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := NewQuota(nil, 3)
		return "", err
	})
	row("NewQuota", "WithEvictionReceiptTTL(1m) without WithEvictOldest", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := NewQuota(e.s, 3, WithEvictionReceiptTTL(time.Minute))
		return "", err
	})
	row("NewQuota", "WithEvictionReceiptTTL(0)", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := NewQuota(e.s, 3, WithEvictOldest(), WithEvictionReceiptTTL(0))
		return "", err
	})
	row("NewQuota", "WithEvictionReceiptTTL(25h)", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := NewQuota(e.s, 3, WithEvictOldest(), WithEvictionReceiptTTL(25*time.Hour))
		return "", err
	})

	// Drop next to sets whose names extend its own: their keys partly match
	// its patterns (expset:{n:1}:* is also the pattern of n:1's meta key).
	row("Drop", "a set whose neighbours `name:1` and `name:1:2` exist", nil, "2 keys; name:1 and name:1:2 kept", func(e *hostileEnv) (string, error) {
		base := e.named("nb")
		for _, n := range []string{base, base + ":1", base + ":1:2"} {
			s, err := Open(context.Background(), e.rdb, n)
			if err != nil {
				return "", err
			}
			if _, err := s.Add(e.ctx, "b", "m", time.Minute); err != nil { // owner "b" is in shard 1 of 16
				return "", err
			}
		}
		n, err := Drop(e.ctx, e.rdb, base)
		if err != nil {
			return "", err
		}
		out := strconv.Itoa(n) + " keys"
		for _, other := range []string{base + ":1", base + ":1:2"} {
			c, err := ReadConfiguration(e.ctx, e.rdb, other)
			if err != nil {
				return out + "; " + err.Error(), nil
			}
			s, err := Open(e.ctx, e.rdb, other, c.recordedOptions()...)
			if err != nil {
				return "", err
			}
			if ok, err := s.Contains(e.ctx, "b", "m"); err != nil || !ok {
				return out + "; a member of " + other + " lost", err
			}
		}
		return out + "; name:1 and name:1:2 kept", nil
	})

	// Zero values and nil pointers: every call that can reach Redis fails
	// with ErrInvalidArgument instead of panicking; the accessors give zeros.
	setCalls := []struct {
		call string
		run  func(e *hostileEnv, s *Set) error
	}{
		{"Set.Add", func(e *hostileEnv, s *Set) error { _, err := s.Add(e.ctx, "o", "m", time.Minute); return err }},
		{"Set.Remove", func(e *hostileEnv, s *Set) error { _, err := s.Remove(e.ctx, "o", "m"); return err }},
		{"Set.Contains", func(e *hostileEnv, s *Set) error { _, err := s.Contains(e.ctx, "o", "m"); return err }},
		{"Set.Deadline", func(e *hostileEnv, s *Set) error { _, err := s.Deadline(e.ctx, "o", "m"); return err }},
		{"Set.Extend", func(e *hostileEnv, s *Set) error { _, err := s.Extend(e.ctx, "o", "m", time.Minute); return err }},
		{"Set.Count", func(e *hostileEnv, s *Set) error { _, err := s.Count(e.ctx, "o"); return err }},
		{"Set.Members", func(e *hostileEnv, s *Set) error { _, err := s.Members(e.ctx, "o", 0); return err }},
		{"Set.Payload", func(e *hostileEnv, s *Set) error { _, err := s.Payload(e.ctx, "o", "m"); return err }},
		{"Set.Stats", func(e *hostileEnv, s *Set) error { _, err := s.Stats(e.ctx); return err }},
		{"Set.ReadEvents", func(e *hostileEnv, s *Set) error { _, _, err := s.ReadEvents(e.ctx, 0, "0", 1, 0); return err }},
		{"Set.DeadLetters", func(e *hostileEnv, s *Set) error { _, err := s.DeadLetters(e.ctx, allShards, 0); return err }},
		{"Set.Kick", func(e *hostileEnv, s *Set) error { _, err := s.Kick(e.ctx); return err }},
		{"Set.DeleteDeadLetters", func(e *hostileEnv, s *Set) error { _, err := s.DeleteDeadLetters(e.ctx); return err }},
		{"Set.Consume", func(e *hostileEnv, s *Set) error {
			return s.Consume(e.ctx, "g", "c", func(context.Context, Expiry) error { return nil })
		}},
		{"NewQuota", func(e *hostileEnv, s *Set) error { _, err := NewQuota(s, 3); return err }},
		{"NewSweeper", func(e *hostileEnv, s *Set) error { _, err := NewSweeper(s); return err }},
		{"Set.Groups", func(e *hostileEnv, s *Set) error { _, err := s.Groups(e.ctx); return err }},
		{"Set.RemoveGroup", func(e *hostileEnv, s *Set) error { _, err := s.RemoveGroup(e.ctx, "g"); return err }},
		{"Set.Running", func(e *hostileEnv, s *Set) error { _, err := s.Running(e.ctx, "g", 10); return err }},
	}
	for _, z := range []struct {
		desc string
		s    *Set
	}{{"zero Set", &Set{}}, {"nil *Set", nil}} {
		for _, c := range setCalls {
			run, s, want := c.run, z.s, error(ErrInvalidArgument)
			if s == nil && (c.call == "NewQuota" || c.call == "NewSweeper") {
				want = ErrInvalidArgument // a nil Set given to a constructor
			}
			row(c.call, z.desc, want, "", func(e *hostileEnv) (string, error) { return "", run(e, s) })
		}
		s := z.s
		row("Set.Name, Shards, ShardOf, OwnerKey", z.desc, nil, `"", 0, -1, ""`, func(e *hostileEnv) (string, error) {
			return fmt.Sprintf("%q, %d, %d, %q", s.Name(), s.Shards(), s.ShardOf("o"), s.OwnerKey("o")), nil
		})
	}
	quotaCalls := []struct {
		call string
		run  func(e *hostileEnv, q *Quota) error
	}{
		{"Quota.Acquire", func(e *hostileEnv, q *Quota) error { _, err := q.Acquire(e.ctx, "o", "m", time.Minute); return err }},
		{"Quota.AcquireMany", func(e *hostileEnv, q *Quota) error { _, err := q.AcquireMany(e.ctx, nil); return err }},
		{"Quota.Release", func(e *hostileEnv, q *Quota) error { _, err := q.Release(e.ctx, "o", "m"); return err }},
	}
	for _, z := range []struct {
		desc string
		q    *Quota
	}{{"zero Quota", &Quota{}}, {"nil *Quota", nil}} {
		for _, c := range quotaCalls {
			run, q := c.run, z.q
			row(c.call, z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) { return "", run(e, q) })
		}
	}
	for _, z := range []struct {
		desc string
		w    *Sweeper
	}{{"zero Sweeper", &Sweeper{}}, {"nil *Sweeper", nil}} {
		w := z.w
		row("Sweeper.SweepOnce", z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := w.SweepOnce(e.ctx)
			return "", err
		})
		row("Sweeper.Run", z.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			return "", w.Run(e.ctx)
		})
	}
	eventsSet := func(e *hostileEnv) (*Set, error) {
		return Open(context.Background(), e.rdb, e.named("groups"), WithExpiryEvents())
	}
	row("Set.Groups", "a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.s.Groups(e.ctx)
		return "", err
	})
	row("Set.Groups", "a set with expiry events and no group", nil, "0 groups", func(e *hostileEnv) (string, error) {
		s, err := eventsSet(e)
		if err != nil {
			return "", err
		}
		gs, err := s.Groups(e.ctx)
		return fmt.Sprintf("%d groups", len(gs)), err
	})
	for _, g := range []struct{ desc, group string }{{`group ""`, ""}, {"group of 257 bytes", strings.Repeat("g", maxConsumerLen+1)}} {
		row("Set.RemoveGroup", g.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			s, err := eventsSet(e)
			if err != nil {
				return "", err
			}
			_, err = s.RemoveGroup(e.ctx, g.group)
			return "", err
		})
	}
	row("Set.RemoveGroup", "a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.s.RemoveGroup(e.ctx, "g")
		return "", err
	})
	row("Set.RemoveGroup", "a group the set does not have", ErrNotFound, "", func(e *hostileEnv) (string, error) {
		s, err := eventsSet(e)
		if err != nil {
			return "", err
		}
		_, err = s.RemoveGroup(e.ctx, "missing")
		return "", err
	})
	groupSet := func(e *hostileEnv) (*Set, error) {
		return Open(context.Background(), e.rdb, e.named("running"), WithExpiryEvents(), WithConsumerGroups("g"))
	}
	for _, c := range []struct {
		desc  string
		group string
		n     int
		want  error
	}{
		{"n 0", "g", 0, ErrInvalidArgument},
		{"n -1", "g", -1, ErrInvalidArgument},
		{"n 10001", "g", maxRunningOwners + 1, ErrInvalidArgument},
		{`group ""`, "", 10, ErrInvalidArgument},
		{"group of 257 bytes", strings.Repeat("g", maxConsumerLen+1), 10, ErrInvalidArgument},
		{"a group the set does not have", "missing", 10, ErrNotFound},
	} {
		row("Set.Running", c.desc, c.want, "", func(e *hostileEnv) (string, error) {
			s, err := groupSet(e)
			if err != nil {
				return "", err
			}
			_, err = s.Running(e.ctx, c.group, c.n)
			return "", err
		})
	}
	row("Set.Running", "a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		_, err := e.s.Running(e.ctx, "g", 10)
		return "", err
	})
	row("Set.Running", "a group that never used WithOwnerConcurrency", nil, "0 owners", func(e *hostileEnv) (string, error) {
		s, err := groupSet(e)
		if err != nil {
			return "", err
		}
		got, err := s.Running(e.ctx, "g", 10)
		return fmt.Sprintf("%d owners", len(got)), err
	})
	nilClients := []struct {
		desc string
		c    redis.UniversalClient
	}{
		{"nil client", nil},
		{"nil *redis.Client", (*redis.Client)(nil)},
		{"nil *redis.ClusterClient", (*redis.ClusterClient)(nil)},
	}
	for _, nc := range nilClients {
		c := nc.c
		row("Open", nc.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := Open(e.ctx, c, "x")
			return "", err
		})
		row("ReadConfiguration", nc.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := ReadConfiguration(e.ctx, c, "x")
			return "", err
		})
		row("Drop", nc.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := Drop(e.ctx, c, "x")
			return "", err
		})
	}

	// Options of Open.
	shardOpts := []struct {
		desc string
		n    int
	}{{"WithShards(0)", 0}, {"WithShards(-1)", -1}, {"WithShards(maxShards+1)", maxShards + 1}, {"WithShards(math.MinInt)", math.MinInt}}
	for _, so := range shardOpts {
		n := so.n
		cs = append(cs, hostileCase{call: "Open", input: so.desc, want: ErrInvalidArgument, name: "shards-bad",
			run: func(e *hostileEnv) (string, error) {
				_, err := Open(context.Background(), e.rdb, e.named("shards-bad"), WithShards(n))
				return "", err
			}})
	}
	groupOpts := []struct {
		desc string
		opts []OpenOption
		want error
	}{
		{"WithConsumerGroups(\"\")", []OpenOption{WithExpiryEvents(), WithConsumerGroups("")}, ErrInvalidArgument},
		{"WithConsumerGroups(257 bytes)", []OpenOption{WithExpiryEvents(), WithConsumerGroups(strings.Repeat("g", maxConsumerLen+1))}, ErrInvalidArgument},
		{"WithConsumerGroups without WithExpiryEvents", []OpenOption{WithConsumerGroups("billing")}, ErrInvalidArgument},
	}
	for _, g := range groupOpts {
		cs = append(cs, hostileCase{call: "Open", input: g.desc, want: g.want, name: "groups-bad",
			run: func(e *hostileEnv) (string, error) {
				_, err := Open(context.Background(), e.rdb, e.named("groups-bad"), g.opts...)
				return "", err
			}})
	}
	retentionOpts := []struct {
		desc     string
		maxAge   time.Duration
		maxLen   int
		maxBytes int64
	}{
		{"WithEventRetention(0, 1, 1MiB)", 0, 1, minEventBytes},
		{"WithEventRetention(999ms, 1, 1MiB)", time.Second - time.Millisecond, 1, minEventBytes},
		{"WithEventRetention(100 years + 1ms, 1, 1MiB)", maxTTL + time.Millisecond, 1, minEventBytes},
		{"WithEventRetention(-1ns, 1, 1MiB)", -1, 1, minEventBytes},
		{"WithEventRetention(1s, 0, 1MiB)", time.Second, 0, minEventBytes},
		{"WithEventRetention(1s, -1, 1MiB)", time.Second, -1, minEventBytes},
		{"WithEventRetention(1s, 2^30+1, 1MiB)", time.Second, maxEventMaxLen + 1, minEventBytes},
		{"WithEventRetention(1s, math.MinInt, 1MiB)", time.Second, math.MinInt, minEventBytes},
		{"WithEventRetention(1s, 1, 0)", time.Second, 1, 0},
		{"WithEventRetention(1s, 1, 1MiB-1)", time.Second, 1, minEventBytes - 1},
		{"WithEventRetention(1s, 1, 1TiB+1)", time.Second, 1, maxEventBytes + 1},
		{"WithEventRetention(1s, 1, -1)", time.Second, 1, -1},
		{"WithEventRetention(1s, 1, math.MinInt64)", time.Second, 1, math.MinInt64},
		{"WithEventRetention(1s, 1, math.MaxInt64)", time.Second, 1, math.MaxInt64},
	}
	for _, r := range retentionOpts {
		cs = append(cs, hostileCase{call: "NewSweeper", input: r.desc, want: ErrInvalidArgument,
			run: func(e *hostileEnv) (string, error) {
				s, err := Open(context.Background(), e.rdb, e.named("retention-bad"), WithExpiryEvents())
				if err != nil {
					return "", err
				}
				_, err = NewSweeper(s, WithEventRetention(r.maxAge, r.maxLen, r.maxBytes))
				return "", err
			}})
	}
	row("NewSweeper", "WithEventRetention(1s, 1, 1MiB) and (100 years, 2^30, 1TiB)", nil, "ok", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("retention-ok"), WithExpiryEvents())
		if err != nil {
			return "", err
		}
		for _, o := range []SweeperOption{WithEventRetention(time.Second, 1, minEventBytes), WithEventRetention(maxTTL, maxEventMaxLen, maxEventBytes)} {
			if _, err := NewSweeper(s, o); err != nil {
				return "", err
			}
		}
		return "ok", nil
	})
	row("NewSweeper", "WithEventRetention(1h, 10, 64MiB) on a set without expiry events", ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("retention-no-events"), WithSweepIndex())
		if err != nil {
			return "", err
		}
		_, err = NewSweeper(s, WithEventRetention(time.Hour, 10, defaultEventBytes))
		return "", err
	})

	// Options of Consume and NewSweeper: each is checked against its call's
	// range (WithLeaseTTL and WithPollInterval apply to both, with their own
	// ranges). consume opens a set with events and runs Consume with an
	// ended context: it checks its options, then returns at once.
	consume := func(e *hostileEnv, opts ...ConsumeOption) error {
		s, err := Open(context.Background(), e.rdb, e.named("consume-opts"), WithExpiryEvents())
		if err != nil {
			return err
		}
		done, cancel := context.WithCancel(e.ctx)
		cancel()
		return s.Consume(done, "g", "c", func(context.Context, Expiry) error { return nil }, opts...)
	}
	sweeper := func(e *hostileEnv, opts ...SweeperOption) error {
		s, err := Open(context.Background(), e.rdb, e.named("consume-opts"), WithExpiryEvents())
		if err != nil {
			return err
		}
		_, err = NewSweeper(s, opts...)
		return err
	}
	loopOpts := []struct {
		call string
		desc string
		opt  any // a ConsumeOption for Set.Consume, a SweeperOption for NewSweeper
		ok   bool
	}{
		{"Set.Consume", "WithMaxHandlingTime(0)", WithMaxHandlingTime(0), false},
		{"Set.Consume", "WithMaxHandlingTime(-1ns)", WithMaxHandlingTime(-1), false},
		{"Set.Consume", "WithMaxHandlingTime(24h+1ns)", WithMaxHandlingTime(24*time.Hour + 1), false},
		{"Set.Consume", "WithMaxHandlingTime(1ms)", WithMaxHandlingTime(time.Millisecond), true},
		{"Set.Consume", "WithMaxHandlingTime(24h)", WithMaxHandlingTime(24 * time.Hour), true},
		{"Set.Consume", "WithConcurrency(0)", WithConcurrency(0), false},
		{"Set.Consume", "WithConcurrency(-1)", WithConcurrency(-1), false},
		{"Set.Consume", "WithConcurrency(math.MinInt)", WithConcurrency(math.MinInt), false},
		{"Set.Consume", "WithConcurrency(1001)", WithConcurrency(maxConcurrency + 1), false},
		{"Set.Consume", "WithConcurrency(1)", WithConcurrency(1), true},
		{"Set.Consume", "WithConcurrency(1000)", WithConcurrency(maxConcurrency), true},
		{"Set.Consume", "WithOwnerConcurrency(-1)", WithOwnerConcurrency(-1), false},
		{"Set.Consume", "WithOwnerConcurrency(math.MinInt)", WithOwnerConcurrency(math.MinInt), false},
		{"Set.Consume", "WithOwnerConcurrency(1<<20+1)", WithOwnerConcurrency(maxOwnerConcurrency + 1), false},
		{"Set.Consume", "WithOwnerConcurrency(0)", WithOwnerConcurrency(0), true},
		{"Set.Consume", "WithOwnerConcurrency(1<<20)", WithOwnerConcurrency(maxOwnerConcurrency), true},
		{"Set.Consume", "WithLeaseTTL(0)", WithLeaseTTL(0), false},
		{"Set.Consume", "WithLeaseTTL(24h+1ns)", WithLeaseTTL(24*time.Hour + 1), false},
		{"Set.Consume", "WithLeaseTTL(1ms)", WithLeaseTTL(time.Millisecond), true},
		{"Set.Consume", "WithPollInterval(0)", WithPollInterval(0), false},
		{"Set.Consume", "WithPollInterval(1m+1ns)", WithPollInterval(time.Minute + 1), false},
		{"NewSweeper", "WithLeaseTTL(1ms) (under the sweeper's 30ms)", WithLeaseTTL(time.Millisecond), false},
		{"NewSweeper", "WithLeaseTTL(1h+1ns)", WithLeaseTTL(time.Hour + 1), false},
		{"NewSweeper", "WithLeaseTTL(30ms)", WithLeaseTTL(30 * time.Millisecond), true},
		{"NewSweeper", "WithPollInterval(0)", WithPollInterval(0), false},
		{"NewSweeper", "WithPollInterval(1m)", WithPollInterval(time.Minute), true},
	}
	for _, lo := range loopOpts {
		row(lo.call, lo.desc, errIf(lo.ok, ErrInvalidArgument), ok(lo.ok, "accepted"), func(e *hostileEnv) (string, error) {
			if lo.call == "Set.Consume" {
				return "accepted", consume(e, lo.opt.(ConsumeOption))
			}
			return "accepted", sweeper(e, lo.opt.(SweeperOption))
		})
	}
	retryHostileRows(row, consume)
	reserveHostileRows(row)
	row("Open", "WithShards(maxShards)", nil, "16384 shards", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("shards-max"), WithShards(maxShards))
		if err != nil {
			return "", err
		}
		return strconv.Itoa(s.Shards()) + " shards", nil
	})
	durables := []struct {
		desc     string
		replicas int
		aof      bool
		timeout  time.Duration
	}{
		{"WithDurability(-1, false, 1s)", -1, false, time.Second},
		{"WithDurability(1001, false, 1s)", maxDurableReplicas + 1, false, time.Second},
		{"WithDurability(math.MinInt, true, 1s)", math.MinInt, true, time.Second},
		{"WithDurability(0, false, 1s) (asks for nothing)", 0, false, time.Second},
		{"WithDurability(1, false, 0)", 1, false, 0},
		{"WithDurability(1, true, -1ns)", 1, true, -1},
		{"WithDurability(1, false, 1m+1ns)", 1, false, maxDurableTimeout + 1},
	}
	for _, d := range durables {
		row("Open", d.desc, ErrInvalidArgument, "", func(e *hostileEnv) (string, error) {
			_, err := Open(context.Background(), e.rdb, e.named("durable-bad"), WithDurability(d.replicas, d.aof, d.timeout))
			return "", err
		})
	}
	row("Open", "WithDurability(1000, false, 1ms) on a server without replicas, then Quota.Acquire", nil, "allowed true, durable false", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("durable"), WithDurability(maxDurableReplicas, false, time.Millisecond))
		if err != nil {
			return "", err
		}
		d, err := must[*Quota](e.t)(NewQuota(s, 1)).Acquire(e.ctx, "o", "m", time.Minute)
		return fmt.Sprintf("allowed %v, durable %v", d.Allowed, d.Durable), err
	})
	row("Open", "WithEvictingServer()", nil, "16 shards", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("evicting"), WithEvictingServer())
		if err != nil {
			return "", err
		}
		return strconv.Itoa(s.Shards()) + " shards", nil
	})
	row("Open", "a nil option, WithClock(nil), WithLogger(nil)", nil, "16 shards", func(e *hostileEnv) (string, error) {
		s, err := Open(context.Background(), e.rdb, e.named("nil-options"), nil, WithClock(nil), WithLogger(nil))
		if err != nil {
			return "", err
		}
		return strconv.Itoa(s.Shards()) + " shards", nil
	})
	row("Open", "other shards than recorded", ErrConfigMismatch, "", func(e *hostileEnv) (string, error) {
		_, err := Open(e.ctx, e.rdb, e.s.Name(), WithShards(3), WithPayloadStorage())
		return "", err
	})
	row("Open", "without the recorded WithPayloadStorage", ErrConfigMismatch, "", func(e *hostileEnv) (string, error) {
		_, err := Open(e.ctx, e.rdb, e.s.Name())
		return "", err
	})
	row("ReadConfiguration", "a valid name never opened", ErrNotFound, "", func(e *hostileEnv) (string, error) {
		_, err := ReadConfiguration(e.ctx, e.rdb, e.named("never"))
		return "", err
	})
	row("Drop", "a valid name never opened", nil, "0 keys", func(e *hostileEnv) (string, error) {
		n, err := Drop(e.ctx, e.rdb, e.named("never"))
		return strconv.Itoa(n) + " keys", err
	})

	// Names: they sit inside every key's hash tag, and Drop matches keys by
	// pattern, so only letters, digits and _.:/- are allowed.
	names := []hostileValue{
		{"name empty", "", false},
		{"name of 129 bytes", strings.Repeat("n", maxNameLen+1), false},
		val("{a}", false), val("a{", false), val("a}", false), val("*", false), val("a?", false),
		val("[a]", false), val("a b", false), val("ü", false), val("a\x00", false), val("a\n", false),
		{"name of 128 bytes (maxNameLen)", "max-length", true},
		{"name using all of `_.:/-`", "a_b.c:d/e-f", true},
	}
	for _, n := range names {
		in, v, good := n.desc, n.v, n.ok
		if strings.HasPrefix(n.desc, "`") {
			in = "name " + n.desc
		}
		name := func(e *hostileEnv) string {
			if !good {
				return v
			}
			if v == "max-length" {
				return e.named(strings.Repeat("n", maxNameLen))
			}
			return e.named(v)
		}
		err := errIf(good, ErrInvalidArgument)
		cs = append(cs,
			hostileCase{call: "Open", input: in, want: err, got: ok(good, "16 shards"), name: v, run: func(e *hostileEnv) (string, error) {
				s, err := Open(context.Background(), e.rdb, name(e))
				if err != nil {
					return "", err
				}
				if good && len(s.Name()) != len(name(e)) {
					return "", fmt.Errorf("name %q became %q", name(e), s.Name())
				}
				return strconv.Itoa(s.Shards()) + " shards", nil
			}},
			hostileCase{call: "Open", input: in + ", opened before", want: err, got: ok(good, "16 shards"), name: v, run: func(e *hostileEnv) (string, error) {
				s, err := Open(e.ctx, e.rdb, name(e))
				if err != nil {
					return "", err
				}
				return strconv.Itoa(s.Shards()) + " shards", nil
			}},
			hostileCase{call: "ReadConfiguration", input: in, want: err, got: ok(good, "16 shards"), run: func(e *hostileEnv) (string, error) {
				c, err := ReadConfiguration(e.ctx, e.rdb, name(e))
				return strconv.Itoa(c.Shards) + " shards", err
			}},
			hostileCase{call: "Drop", input: in, want: err, got: ok(good, "1 keys"), run: func(e *hostileEnv) (string, error) {
				n, err := Drop(e.ctx, e.rdb, name(e))
				return strconv.Itoa(n) + " keys", err
			}},
		)
	}
	cs = append(cs, hostileJobCases()...)
	cs = append(cs, hostileScheduleCases()...)
	return cs
}

// TestHostileInput runs every row of the hostile-input table (see
// docs/hostile-input.md) on every backend, in order: each call gives its
// sentinel error (wrapped, named "expset: ...") or succeeds with the result
// in the table, and a rejected call leaves the database as it was.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := newFakeClock()
		// An hour ahead of the server: the members the rows add with a
		// minute's ttl are not due however slowly the test runs. Their keys
		// expire by the server's clock, though (PEXPIRE is relative), so
		// every 20 s the loop below takes the TTL off every key of both
		// sets: a rejected row's before and after never straddle a key's
		// expiry.
		clk.Advance(time.Hour)
		e := &hostileEnv{t: t, ctx: ctx, rdb: b.rdb, clk: clk, keys: map[string]string{}, names: map[string]string{}}
		e.s = must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithClock(clk.Now), WithPayloadStorage()))
		e.plain = must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithClock(clk.Now)))
		e.q = must[*Quota](t)(NewQuota(e.s, 3))
		must[time.Time](t)(e.s.Add(ctx, "base", "m", time.Minute))
		must[time.Time](t)(e.s.Add(ctx, "ttl-extend", "x", time.Hour))
		must[time.Time](t)(e.plain.Add(ctx, "u", "m", time.Minute))

		kept := time.Now()
		for i, c := range hostileCases() {
			if time.Since(kept) > 20*time.Second {
				for _, name := range []string{e.s.Name(), e.plain.Name()} {
					for _, k := range setKeys(t, b.rdb, name) {
						b.rdb.Persist(ctx, k)
					}
				}
				kept = time.Now()
			}
			where := fmt.Sprintf("row %d: %s with %s", i, c.call, c.input)
			var before []map[string]string
			if c.want != nil {
				before = []map[string]string{snapshot(t, b.rdb, e.s.Name()), snapshot(t, b.rdb, e.plain.Name())}
			}
			got, err := runHostile(e, c)
			if c.want == nil {
				if err != nil || got != c.got {
					t.Errorf("%s: got %q, %v; want %q", where, got, err, c.got)
				}
				continue
			}
			if !errors.Is(err, c.want) || !strings.HasPrefix(err.Error(), "expset: ") {
				t.Errorf("%s: got %v, want %v", where, err, c.want)
			}
			after := []map[string]string{snapshot(t, b.rdb, e.s.Name()), snapshot(t, b.rdb, e.plain.Name())}
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("%s: rejected, but changed the data:\nbefore %v\nafter  %v", where, before, after)
			}
			if c.name != "" {
				name := c.name
				if n, ok := e.names[c.name]; ok {
					name = n
				}
				if n := b.rdb.Exists(ctx, metaKey(name)).Val(); n != 0 {
					t.Fatalf("%s: rejected, but recorded %s", where, metaKey(name))
				}
			}
		}
	})
}

// runHostile runs one row, turning a panic into an error.
func runHostile(e *hostileEnv, c hostileCase) (got string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return c.run(e)
}

// hostileDoc renders the table as docs/hostile-input.md.
func hostileDoc() string {
	var b strings.Builder
	b.WriteString(`# Hostile input: what every public call does with it

Generated from the table in ` + "`hostile_test.go`" + ` (regenerate with
` + "`go test -run TestHostileInputDoc -update-hostile-doc`" + `; the test fails when they
differ). ` + "`TestHostileInput`" + ` runs every row on miniredis, a real redis-server and
a three-master cluster. A rejected call returns an error matching the sentinel
shown (` + "`errors.Is`" + `) and changes nothing: the test compares a snapshot of the
sets' keys before and after. An accepted call gives the result shown (times
are offsets from the test's fixed clock); inputs split by / share a row. Owners and members are any 1 to 1024
bytes. A nil ` + "`context.Context`" + ` is the caller's bug, as in the standard library.
A zero or nil ` + "`*Set`" + `, ` + "`*Quota`" + ` or ` + "`*Sweeper`" + ` fails every call that reaches Redis with
` + "`ErrInvalidArgument`" + `; ` + "`Set.Name`" + `, ` + "`Shards`" + `, ` + "`ShardOf`" + ` and ` + "`OwnerKey`" + ` touch no Redis.
The package ` + "`idcodec`" + ` touches no set and has tests of its own for bad input
(` + "`TestNewCodecInvalidLayout`" + `, ` + "`TestCodecAfterCount`" + `, ` + "`FuzzCodecAfter`" + `).

| input | calls | outcome |
|---|---|---|
`)
	// One line per input and error, listing the calls in the table's
	// order; one line per accepted input, with each call's result.
	type line struct{ input, outcome string }
	var lines []line
	calls := map[line][]string{}   // by line: the calls, or "calls: result"
	results := map[line][]string{} // by line of accepted input: the results in order
	for _, c := range hostileCases() {
		l := line{c.input, "ok"}
		if c.want != nil {
			l.outcome = "`" + sentinelName(c.want) + "`"
		}
		if _, ok := calls[l]; !ok {
			lines = append(lines, l)
		}
		call := "`" + c.call + "`"
		if c.want != nil {
			calls[l] = append(calls[l], call)
			continue
		}
		i := slices.Index(results[l], c.got)
		if i < 0 {
			results[l] = append(results[l], c.got)
			calls[l] = append(calls[l], call)
			continue
		}
		calls[l][i] += ", " + call
	}
	// Inputs whose calls and outcomes read the same share one row, at the
	// first one's place.
	type row struct {
		inputs         []string
		cells, outcome string
	}
	var rows []*row
	byCells := map[[2]string]*row{}
	for _, l := range lines {
		cells := strings.Join(calls[l], ", ")
		if l.outcome == "ok" {
			parts := make([]string, len(calls[l]))
			for i, c := range calls[l] {
				parts[i] = c + ": " + mdCell(results[l][i])
			}
			cells = strings.Join(parts, "; ")
		}
		k := [2]string{cells, l.outcome}
		if r := byCells[k]; r != nil {
			r.inputs = append(r.inputs, l.input)
			continue
		}
		byCells[k] = &row{inputs: []string{l.input}, cells: cells, outcome: l.outcome}
		rows = append(rows, byCells[k])
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", mdCell(joinInputs(r.inputs)), r.cells, r.outcome)
	}
	return b.String()
}

// joinInputs writes the inputs of one row: "owner `a` / `b`, n 1" when
// they differ only between a first word and a suffix after a comma that
// they share, else in full, joined by " / ".
func joinInputs(in []string) string {
	if len(in) == 1 {
		return in[0]
	}
	split := func(s string) (head, mid, tail string, ok bool) {
		head, rest, ok := strings.Cut(s, " ")
		if !ok || strings.ContainsAny(head, "`(\"") {
			return "", "", "", false
		}
		mid, tail, _ = strings.Cut(rest, ", ")
		return head, mid, tail, mid != ""
	}
	head, _, tail, ok := split(in[0])
	mids := make([]string, len(in))
	for i, s := range in {
		h, m, tl, ok1 := split(s)
		if !ok || !ok1 || h != head || tl != tail {
			return strings.Join(in, " / ")
		}
		mids[i] = m
	}
	out := head + " " + strings.Join(mids, " / ")
	if tail != "" {
		out += ", " + tail
	}
	return out
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// sentinelName returns the exported name of a sentinel error.
func sentinelName(err error) string {
	for name, e := range map[string]error{
		"ErrNotFound": ErrNotFound, "ErrInvalidArgument": ErrInvalidArgument,
		"ErrConfigMismatch": ErrConfigMismatch, "errUnexpectedReply": errUnexpectedReply,
	} {
		if e == err {
			return name
		}
	}
	return err.Error()
}

// TestHostileInputDoc checks that docs/hostile-input.md is the table in
// this file, rendered (run with -update-hostile-doc to rewrite it).
func TestHostileInputDoc(t *testing.T) {
	t.Parallel()
	want := hostileDoc()
	if *updateHostileDoc {
		if err := os.WriteFile(hostileDocPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(hostileDocPath)
	if err != nil {
		t.Fatalf("%v (create it with go test -run TestHostileInputDoc -update-hostile-doc)", err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from the table in hostile_test.go; regenerate it with go test -run TestHostileInputDoc -update-hostile-doc", hostileDocPath)
	}
}
