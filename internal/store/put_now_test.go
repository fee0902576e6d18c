package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/expset/expset/internal/redistest"
)

// lastEntry returns the fields of the newest entry of stream, in their
// order, as the server keeps them.
func lastEntry(t *testing.T, rdb redis.UniversalClient, stream string) []string {
	t.Helper()
	v, err := rdb.Do(context.Background(), "XREVRANGE", stream, "+", "-", "COUNT", "1").Slice()
	if err != nil || len(v) != 1 {
		t.Fatalf("XREVRANGE %s: %v %v", stream, v, err)
	}
	e, _ := v[0].([]any)
	if len(e) != 2 {
		t.Fatalf("XREVRANGE %s: entry %v", stream, v[0])
	}
	fs, _ := e[1].([]any)
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = fmt.Sprint(f)
	}
	return out
}

// sweepAll sweeps shard until nothing is due there and returns the members
// it removed.
func sweepAll(t *testing.T, s *Store, shard int) int {
	t.Helper()
	a := SweepArgs{Shard: shard, Members: 100, PerRound: 100, MaxAge: time.Hour, MaxLen: 1000, MaxBytes: 1 << 30}
	expired := 0
	for range 10 {
		r, err := s.Sweep(context.Background(), a)
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		expired += r.Expired
		if len(r.Due) == 0 {
			return expired
		}
		a.Owners = r.Due
	}
	t.Fatal("the shard still due after 10 sweep rounds")
	return 0
}

// newClockedStore is newTestStore (2 shards) on an injected clock that
// reads *now, starting at ms.
func newClockedStore(t *testing.T, rdb redis.UniversalClient, ms int64) (s *Store, now *time.Time, ops func() []string) {
	t.Helper()
	s, ops = newTestStore(t, rdb, 2)
	at := time.UnixMilli(ms)
	s.clock = func() time.Time { return at }
	return s, &at, ops
}

// nowJob is a job of the cases on which put_now.lua and reschedule_now.lua
// are checked against the sweeper.
type nowJob struct {
	owner, id  string
	payload    []byte
	hasPayload bool
}

// nowJobs: with and without an owner, with a payload, an empty one and
// none, an ID and a payload of any bytes.
var nowJobs = []nowJob{
	{"", "plain", nil, false},
	{"", "empty", nil, true},
	{"", "paid", []byte("pay"), true},
	{"", "\x00\xff{x}:", []byte("\x00\n\xff"), true},
	{"u", "owned", []byte("pay-u"), true},
	{"u", "owned-plain", nil, false},
}

func (c nowJob) String() string { return fmt.Sprintf("%q of %q", c.id, c.owner) }

// sweptJob is a job of nowJobs on a store: its keys (jobKeys), and the
// entry the sweeper wrote for it.
type sweptJob struct {
	nowJob
	bucket string // its owner key's tail: the owner, or the job's bucket (jobKeys)
	keys   []string
	sk     *Keys // its shard's keys
	swept  []string
}

// sweptJobs puts each job of nowJobs due at once on s with put.lua, sweeps
// it, and returns it with the fields of the entry the sweeper wrote for it
// (lastEntry).
func sweptJobs(t *testing.T, rdb redis.UniversalClient, s *Store) []sweptJob {
	t.Helper()
	var out []sweptJob
	for _, c := range nowJobs {
		shard, owner, keys := s.jobKeys(c.owner, c.id)
		old := s.putCall(c.owner, c.id, 0, c.payload, c.hasPayload)
		s.Run(context.Background(), old)
		if !putWrote(old.Reply) || old.Err != nil {
			t.Fatalf("%s: put.lua: %v %v", c, old.Reply, old.Err)
		}
		if n := sweepAll(t, s, shard); n != 1 {
			t.Fatalf("%s: swept %d, want 1", c, n)
		}
		sk := &s.shards[shard]
		out = append(out, sweptJob{c, owner, keys, sk, lastEntry(t, rdb, sk.Events)})
	}
	return out
}

// TestStorePutNowWritesTheSweepersEntry: put_now.lua appends, field for
// field and byte for byte, the entry the sweeper writes for the same job
// put due at once by put.lua (nowJobs), and writes no key of the job's
// owner, payloads or due index; the entry's d is the clock's now, or,
// without one, the server's TIME in decimal ms, as the reply says.
func TestStorePutNowWritesTheSweepersEntry(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, clock, ops := newClockedStore(t, rdb, 1_767_225_600_123)
		now := *clock
		for _, c := range sweptJobs(t, rdb, s) {
			what, sk := c.String(), c.sk
			due, put, _, err := s.Put(ctx, c.owner, c.id, 0, c.payload, c.hasPayload)
			if err != nil || !put || !due.Equal(now) {
				t.Fatalf("%s: Put: %v %v %v, want %v true", what, due, put, err, now)
			}
			if got := lastEntry(t, rdb, sk.Events); !slices.Equal(got, c.swept) {
				t.Errorf("%s: put_now.lua wrote %q, the sweeper %q", what, got, c.swept)
			}
			if n := rdb.Exists(ctx, c.keys[0], sk.Payload+c.bucket, sk.Due).Val(); n != 0 {
				t.Errorf("%s: %d of the owner's key, its payloads' and the due index exist, want none", what, n)
			}
		}
		if got := ops(); !slices.Contains(got, "put") {
			t.Errorf("OnCall saw %v, want put among them", got)
		}

		// The server's clock.
		s.clock = nil
		before := time.Now().Add(-time.Minute)
		due, put, _, err := s.Put(ctx, "", "srv", 0, nil, false)
		if err != nil || !put || due.Before(before) {
			t.Fatalf("Put on the server's clock: %v %v %v", due, put, err)
		}
		shard, _ := s.JobBucket("srv")
		e := lastEntry(t, rdb, s.shards[shard].Events)
		if len(e) != 6 || e[4] != "d" || e[5] != strconv.FormatInt(due.UnixMilli(), 10) {
			t.Fatalf("entry %q, want d %d", e, due.UnixMilli())
		}
	})
}

// TestStorePutNowWaitingAndRetried: put_now.lua leaves a job waiting in
// its owner's set (any deadline) as it is and replies its deadline, also
// when its call runs twice, and leaves no receipt; a call run twice writes
// one entry, the second run replying what the first did; a call without a
// receipt (its client never sends one again) writes none.
func TestStorePutNowWaitingAndRetried(t *testing.T) {
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		s, now, _ := newClockedStore(t, rdb, 1_767_225_600_000)
		xlen := func() int64 {
			var n int64
			for _, sk := range s.shards {
				n += rdb.XLen(ctx, sk.Events).Val()
			}
			return n
		}
		run := func(c *Call) (time.Time, bool) {
			t.Helper()
			s.Run(ctx, c)
			due, put, err := readPutNow(c.Reply)
			if c.Err != nil || err != nil {
				t.Fatalf("put_now.lua: %v %v", c.Err, err)
			}
			return due, put
		}

		for _, delay := range []int64{3_600_000, 1} {
			id := "waiting-" + strconv.FormatInt(delay, 10)
			if _, put, _, err := s.Put(ctx, "", id, delay, nil, false); err != nil || !put {
				t.Fatalf("Put %s: %v %v", id, put, err)
			}
			if delay == 1 {
				*now = now.Add(time.Second) // due, not swept
			}
			c := s.putNowCall("", id, []byte("x"), true)
			for i := range 2 {
				if due, put := run(c); put || due.UnixMilli() != 1_767_225_600_000+delay {
					t.Fatalf("%s, run %d: %v %v, want its deadline and false", id, i+1, due, put)
				}
			}
			if n := rdb.Exists(ctx, c.Keys[2]).Val(); n != 0 {
				t.Fatalf("%s: the receipt of a call that wrote nothing is left", id)
			}
		}
		if n := xlen(); n != 0 {
			t.Fatalf("%d entries after Puts of waiting jobs, want none", n)
		}

		c := s.putNowCall("u", "twice", []byte("p"), true)
		first, put := run(c)
		if !put || !first.Equal(*now) {
			t.Fatalf("first run: %v %v, want %v true", first, put, *now)
		}
		*now = now.Add(time.Minute)
		if again, put := run(s.putNowCall("u", "twice", []byte("p"), true)); !put || !again.Equal(*now) {
			t.Fatalf("a new call of a job not waiting: %v %v, want %v true", again, put, *now)
		}
		if again, put := run(c); !put || !again.Equal(first) {
			t.Fatalf("the first call run again: %v %v, want %v true", again, put, first)
		}
		if n := xlen(); n != 2 {
			t.Fatalf("%d entries, want 2: one per call", n)
		}

		// No receipt: each run is a put of its own.
		c = s.putNowCall("", "once", nil, false)
		c.Args[1] = int64(0)
		run(c)
		run(c)
		if n := xlen(); n != 4 {
			t.Fatalf("%d entries, want 4: a call without a receipt run twice writes twice", n)
		}
		if n := rdb.Exists(ctx, c.Keys[2]).Val(); n != 0 {
			t.Fatal("a call without a receipt wrote one")
		}
	})
}

// TestStorePutNowServerTimeDigits: on the server's clock, the due time
// put_now.lua builds from TIME's seconds and microseconds (these given
// without leading zeros, 1 to 6 digits) is the time in whole ms, in the
// entry's d and in the reply. miniredis, whose TIME a test can set.
func TestStorePutNowServerTimeDigits(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	s, _ := newTestStore(t, rdb, 1)
	base := time.Unix(1_767_225_600, 0)
	for i, us := range []int{0, 7, 45, 999, 1000, 2345, 12345, 99999, 100000, 123456, 999999} {
		at := base.Add(time.Duration(us) * time.Microsecond)
		mr.SetTime(at)
		id := "j" + strconv.Itoa(i)
		due, put, _, err := s.Put(ctx, "", id, 0, nil, false)
		want := at.Truncate(time.Millisecond)
		if err != nil || !put || !due.Equal(want) {
			t.Fatalf("TIME %d µs past the second: %v %v %v, want %v true", us, due, put, err, want)
		}
		if e := lastEntry(t, rdb, s.shards[0].Events); len(e) != 6 || e[3] != id || e[5] != strconv.FormatInt(want.UnixMilli(), 10) {
			t.Fatalf("TIME %d µs past the second: entry %q, want d %d", us, e, want.UnixMilli())
		}
	}
}
