package expset

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"reflect"
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

// hostileRows builds the table: row appends a row; the rest are helpers
// the parts of the table share.
type hostileRows struct {
	cs    []hostileCase
	huge  string                        // 1 MiB
	long  func(n int) string            // n bytes
	ok    func(b bool, s string) string // s if b, else ""
	errIf func(b bool, err error) error // nil if b, else err
}

func (r *hostileRows) row(call, input string, want error, got string, run func(e *hostileEnv) (string, error)) {
	r.cs = append(r.cs, hostileCase{call: call, input: input, want: want, got: got, run: run})
}

// hostileCases returns the hostile-input table, its rows in this order:
// owners and members, ttls, limits and payloads (hostile_keys_test.go,
// hostile_values_test.go), nil options and clients, AcquireWait, Drop and
// zero values (hostile_calls_test.go), options and names
// (hostile_options_test.go), then the jobs' calls (hostile_jobs_test.go).
func hostileCases() []hostileCase {
	r := &hostileRows{
		huge: strings.Repeat("x", 1<<20),
		long: func(n int) string { return strings.Repeat("x", n) },
		ok: func(b bool, s string) string {
			if b {
				return s
			}
			return ""
		},
		errIf: func(b bool, err error) error {
			if b {
				return nil
			}
			return err
		},
	}
	hostileKeyRows(r)
	hostileValueRows(r)
	hostileCallRows(r)
	hostileOptionRows(r)
	hostileNameRows(r)
	return append(append(r.cs, hostileJobCases()...), hostileScheduleCases()...)
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
