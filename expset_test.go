package expset

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestAddReadsAndExpiry(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		t0 := clk.Now()

		d1 := must[time.Time](t)(s.Add(ctx, "alice", "o1", 10*time.Second))
		if want := t0.Add(10 * time.Second); !d1.Equal(want) {
			t.Fatalf("deadline %v, want %v", d1, want)
		}
		must[time.Time](t)(s.Add(ctx, "alice", "o2", 5*time.Second))
		must[time.Time](t)(s.Add(ctx, "alice", "o3", 20*time.Second))

		if n := must[int](t)(s.Count(ctx, "alice")); n != 3 {
			t.Fatalf("count %d, want 3", n)
		}
		got := must[[]Member](t)(s.Members(ctx, "alice", 0))
		want := []Member{
			{"o2", t0.Add(5 * time.Second)},
			{"o1", t0.Add(10 * time.Second)},
			{"o3", t0.Add(20 * time.Second)},
		}
		if !equalMembers(got, want) {
			t.Fatalf("members %v, want %v", got, want)
		}
		if got := must[[]Member](t)(s.Members(ctx, "alice", 2)); !equalMembers(got, want[:2]) {
			t.Fatalf("Members(n=2) %v", got)
		}

		// Exactly at the deadline a member is expired; a millisecond before it
		// is live.
		clk.Advance(5*time.Second - time.Millisecond)
		if ok := must[bool](t)(s.Contains(ctx, "alice", "o2")); !ok {
			t.Fatal("o2 expired a millisecond early")
		}
		clk.Advance(time.Millisecond)
		if ok := must[bool](t)(s.Contains(ctx, "alice", "o2")); ok {
			t.Fatal("o2 still live at its deadline")
		}
		if _, err := s.Deadline(ctx, "alice", "o2"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Deadline of expired member: %v, want ErrNotFound", err)
		}
		if n := must[int](t)(s.Count(ctx, "alice")); n != 2 {
			t.Fatalf("count %d after expiry, want 2", n)
		}
		if got := must[[]Member](t)(s.Members(ctx, "alice", 0)); !equalMembers(got, want[1:]) {
			t.Fatalf("members %v after expiry", got)
		}
		// Invisible, though nothing has removed it yet.
		if n := b.rdb.ZCard(ctx, s.OwnerKey("alice")).Val(); n != 3 {
			t.Fatalf("ZCARD %d: reads must hide expired members, not remove them", n)
		}
		if d := must[time.Time](t)(s.Deadline(ctx, "alice", "o1")); !d.Equal(want[1].Deadline) {
			t.Fatalf("Deadline %v", d)
		}

		// Upsert replaces the deadline, earlier or later; Add drops what expired.
		d := must[time.Time](t)(s.Add(ctx, "alice", "o3", time.Second))
		if !d.Equal(clk.Now().Add(time.Second)) {
			t.Fatalf("upsert deadline %v", d)
		}
		if n := b.rdb.ZCard(ctx, s.OwnerKey("alice")).Val(); n != 2 {
			t.Fatalf("ZCARD %d after Add: expired member not dropped", n)
		}
		if n := must[int](t)(s.Count(ctx, "nobody")); n != 0 {
			t.Fatalf("count of unknown owner %d", n)
		}
	})
}

func equalMembers(a, b []Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !a[i].Deadline.Equal(b[i].Deadline) {
			return false
		}
	}
	return true
}

func TestRemove(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		for _, m := range []string{"a", "b", "c"} {
			must[time.Time](t)(s.Add(ctx, "u", m, time.Minute))
		}
		must[time.Time](t)(s.Add(ctx, "u", "short", time.Second))
		clk.Advance(2 * time.Second)
		// "short" expired: removing it does not count; "zz" was never there.
		if n := must[int](t)(s.Remove(ctx, "u", "a", "short", "zz")); n != 1 {
			t.Fatalf("removed %d, want 1", n)
		}
		if n := must[int](t)(s.Remove(ctx, "u")); n != 0 {
			t.Fatalf("Remove with no members removed %d", n)
		}
		if got := must[[]Member](t)(s.Members(ctx, "u", 0)); len(got) != 2 {
			t.Fatalf("members %v", got)
		}
		if n := must[int](t)(s.Remove(ctx, "u", "b", "c")); n != 2 {
			t.Fatalf("removed %d, want 2", n)
		}
		// An owner emptied by Remove leaves no key behind, index entry included.
		if keys := setKeys(t, b.rdb, s.Name()); !reflect.DeepEqual(keys, []string{metaKey(s.Name())}) {
			t.Fatalf("keys left: %v", keys)
		}
		if n := must[int](t)(s.Remove(ctx, "ghost", "x")); n != 0 {
			t.Fatalf("removed %d from an unknown owner", n)
		}
	})
}

func TestRemoveManyInBatches(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b)
		var ids []string
		for i := 0; i < 2500; i++ {
			ids = append(ids, "m"+strconv.Itoa(i))
		}
		concurrently(t, 2400, func(i int) error {
			_, err := s.Add(ctx, "bulk", ids[i], time.Hour)
			return err
		})
		if n := must[int](t)(s.Remove(ctx, "bulk", ids...)); n != 2400 {
			t.Fatalf("removed %d, want 2400", n)
		}
		if n := must[int](t)(s.Count(ctx, "bulk")); n != 0 {
			t.Fatalf("count %d", n)
		}
	})
}

func TestExtend(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		t0 := clk.Now()
		must[time.Time](t)(s.Add(ctx, "u", "m", 10*time.Second))
		clk.Advance(8 * time.Second)
		d := must[time.Time](t)(s.Extend(ctx, "u", "m", 10*time.Second))
		if want := t0.Add(18 * time.Second); !d.Equal(want) {
			t.Fatalf("extended to %v, want %v", d, want)
		}
		// Never shortens.
		d = must[time.Time](t)(s.Extend(ctx, "u", "m", time.Second))
		if want := t0.Add(18 * time.Second); !d.Equal(want) {
			t.Fatalf("Extend shortened the deadline to %v", d)
		}
		if _, err := s.Extend(ctx, "u", "nope", time.Second); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Extend of absent member: %v", err)
		}
		clk.Advance(10 * time.Second)
		if _, err := s.Extend(ctx, "u", "m", time.Hour); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Extend of expired member: %v, want ErrNotFound", err)
		}
	})
}

// TestKeyTTL checks that an owner key holding only expired members goes away
// with no sweeper: its key TTL reaches the end of its latest deadline's
// TTL bucket (ttlBucket) and no further than the longest ttl given plus one
// bucket. The payload hash lives to its latest deadline.
func TestKeyTTL(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, _ := newTestSet(t, b, WithPayloadStorage())
		key := s.OwnerKey("u")
		must[time.Time](t)(s.Add(ctx, "u", "a", 30*time.Second))
		checkKeyTTL(t, b, key, 30*time.Second)
		must[time.Time](t)(s.Add(ctx, "u", "b", 60*time.Second, WithPayload([]byte("x"))))
		checkKeyTTL(t, b, key, 60*time.Second)
		checkPTTL(t, b, s.shards[s.ShardOf("u")].Payload+"u", 60*time.Second)
		// A shorter ttl does not shorten the key's life.
		must[time.Time](t)(s.Add(ctx, "u", "c", 10*time.Second))
		checkKeyTTL(t, b, key, 60*time.Second)
		must[time.Time](t)(s.Extend(ctx, "u", "b", 90*time.Second))
		checkKeyTTL(t, b, key, 90*time.Second)
		checkPTTL(t, b, s.shards[s.ShardOf("u")].Payload+"u", 90*time.Second)

		q := must[*Quota](t)(NewQuota(s, 5))
		must[Decision](t)(q.Acquire(ctx, "v", "a", 40*time.Second))
		checkKeyTTL(t, b, s.OwnerKey("v"), 40*time.Second)
		must[Decision](t)(q.Acquire(ctx, "v", "b", 50*time.Second))
		checkKeyTTL(t, b, s.OwnerKey("v"), 50*time.Second)
	})
}

// checkPTTL checks that key's TTL was set to want by a call made since b's
// subtest began: on a real server it has run down since by at most the time
// elapsed, give or take the server's millisecond (miniredis's TTLs stand
// still).
func checkPTTL(t *testing.T, b backend, key string, want time.Duration) {
	t.Helper()
	got := b.rdb.PTTL(context.Background(), key).Val()
	if least := want - time.Since(b.start) - time.Millisecond; got > want || got < least {
		t.Fatalf("PTTL %s = %v, want %v less at most the %v the test has run", key, got, want, want-least)
	}
}

// checkKeyTTL checks an owner key's TTL after a write whose latest deadline
// was want from then: it reaches that deadline and at most one ttlBucket
// past it (the key of a set without events expires at the end of its
// latest deadline's bucket), less the time the test has run.
func checkKeyTTL(t *testing.T, b backend, key string, want time.Duration) {
	t.Helper()
	got := b.rdb.PTTL(context.Background(), key).Val()
	if least := want - time.Since(b.start) - time.Millisecond; got > want+ttlBucket || got < least {
		t.Fatalf("PTTL %s = %v, want %v to %v, less at most the %v the test has run", key, got, want, want+ttlBucket, want-least)
	}
}

func TestKeysVanishWithoutSweeper(t *testing.T) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		s := must[*Set](t)(Open(context.Background(), rdb, "orders"))
		must[time.Time](t)(s.Add(context.Background(), "u", "a", 3*time.Second))
		mr.FastForward(3 * time.Second)
		if !mr.Exists(s.OwnerKey("u")) {
			t.Fatal("owner key gone before the end of its deadline's TTL bucket")
		}
		mr.FastForward(ttlBucket)
		if mr.Exists(s.OwnerKey("u")) {
			t.Fatal("owner key outlived its only member by more than one TTL bucket")
		}
	})
	t.Run("redis", func(t *testing.T) {
		b := backend{rdb: realClient(t), start: time.Now()}
		// Key TTLs are relative to the call's now, so a clock 300ms before a
		// bucket's end keeps the test short: the member's deadline is 200ms
		// before that end, and the real server expires the key at it.
		bucket := ttlBucket.Milliseconds()
		clk := &fakeClock{t: time.UnixMilli((time.Now().UnixMilli()/bucket+1)*bucket - 300)}
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithClock(clk.Now)))
		ctx := context.Background()
		must[time.Time](t)(s.Add(ctx, "u", "a", 100*time.Millisecond))
		checkPTTL(t, b, s.OwnerKey("u"), 300*time.Millisecond)
		deadline := time.Now().Add(5 * time.Second)
		for b.rdb.Exists(ctx, s.OwnerKey("u")).Val() == 1 {
			if time.Now().After(deadline) {
				t.Fatal("owner key still there 5s after the end of its only member's TTL bucket")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestServerClock checks that without WithClock "now" is the server's TIME.
func TestServerClock(t *testing.T) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		at := time.Date(2031, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
		mr.SetTime(at)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), rdb, "orders"))
		d := must[time.Time](t)(s.Add(ctx, "u", "a", 1500*time.Millisecond))
		if want := at.Add(1500 * time.Millisecond); !d.Equal(want) {
			t.Fatalf("deadline %v, want %v from the server's TIME", d, want)
		}
		mr.SetTime(at.Add(1499 * time.Millisecond))
		if !must[bool](t)(s.Contains(ctx, "u", "a")) {
			t.Fatal("expired early by server time")
		}
		mr.SetTime(at.Add(1500 * time.Millisecond))
		if must[bool](t)(s.Contains(ctx, "u", "a")) {
			t.Fatal("live at its deadline by server time")
		}
	})
	t.Run("redis", func(t *testing.T) {
		rdb := realClient(t)
		ctx := context.Background()
		s := must[*Set](t)(Open(context.Background(), rdb, uniqueName(t, rdb)))
		before := time.Now()
		d := must[time.Time](t)(s.Add(ctx, "u", "a", 100*time.Millisecond))
		after := time.Now()
		// The server runs on this machine: its clock is ours within a second.
		if d.Before(before.Add(100*time.Millisecond-time.Second)) || d.After(after.Add(100*time.Millisecond+time.Second)) {
			t.Fatalf("deadline %v not near local now+100ms (%v..%v)", d, before, after)
		}
		if d.UnixMilli()*int64(time.Millisecond) != d.UnixNano() {
			t.Fatalf("deadline %v is not whole milliseconds", d)
		}
		for time.Now().Before(d.Add(50 * time.Millisecond)) {
			time.Sleep(10 * time.Millisecond)
		}
		if must[bool](t)(s.Contains(ctx, "u", "a")) {
			t.Fatal("member live after its deadline by server time")
		}
	})
}

func TestOpenRecordsConfiguration(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t, b.rdb)
		must[*Set](t)(Open(context.Background(), b.rdb, name, WithShards(8)))
		must[*Set](t)(Open(context.Background(), b.rdb, name, WithShards(8)))
		for _, opts := range [][]OpenOption{
			nil, // default 16 shards
			{WithShards(4)},
			{WithShards(8), WithExpiryEvents()},
			{WithShards(8), WithPayloadStorage()},
			{WithShards(8), WithSweepIndex()},
		} {
			_, err := Open(context.Background(), b.rdb, name, opts...)
			if !errors.Is(err, ErrConfigMismatch) {
				t.Fatalf("reopen with other options: %v, want ErrConfigMismatch", err)
			}
			// The message says how to open the set as recorded.
			if msg := err.Error(); !strings.Contains(msg, "open it with WithShards(8), or WithRecordedConfiguration") {
				t.Fatalf("mismatch message %q does not say how to open the set", msg)
			}
		}
		// What it says works.
		must[*Set](t)(Open(context.Background(), b.rdb, name, WithRecordedConfiguration()))
		s := must[*Set](t)(Open(context.Background(), b.rdb, uniqueName(t, b.rdb), WithShards(3), WithExpiryEvents(), WithPayloadStorage()))
		_, err := Open(context.Background(), b.rdb, s.Name())
		if want := "open it with WithShards(3), WithExpiryEvents(), WithPayloadStorage(), or WithRecordedConfiguration"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("mismatch message %v, want it to say %q", err, want)
		}
	})
}

// TestOwnersMapToTheirOwnKeys checks that owners with braces, colons, binary
// bytes or spaces each get their own key, in their shard's slot.
func TestOwnersMapToTheirOwnKeys(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b)
		owners := []string{"a", "{a}", "a}", "{", "}", "a:b", "a:{b}:c", "\x00", "\x00\x01\xff", "a b\n", "ü€", "{x}{y}"}
		for i, o := range owners {
			must[time.Time](t)(s.Add(ctx, o, "m", time.Duration(i+1)*time.Minute))
		}
		for i, o := range owners {
			got := must[[]Member](t)(s.Members(ctx, o, 0))
			want := []Member{{"m", clk.Now().Add(time.Duration(i+1) * time.Minute)}}
			if !equalMembers(got, want) {
				t.Fatalf("owner %q: members %v, want %v", o, got, want)
			}
		}
		seen := map[string]bool{}
		for _, o := range owners {
			k := s.OwnerKey(o)
			if seen[k] {
				t.Fatalf("two owners share key %q", k)
			}
			seen[k] = true
			tag := "{" + s.Name() + ":"
			if hashTag(k)[:len(tag)-1] != tag[1:] {
				t.Fatalf("key %q has hash tag %q", k, hashTag(k))
			}
		}
	})
}

// hashTag returns what Redis Cluster hashes for key.
func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						return key[i+1 : j]
					}
					return key
				}
			}
			return key
		}
	}
	return key
}

func TestPayloads(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithPayloadStorage())
		must[time.Time](t)(s.Add(ctx, "u", "o1", time.Minute, WithPayload([]byte(`{"total":42}`))))
		must[time.Time](t)(s.Add(ctx, "u", "o2", time.Minute))
		bin := []byte{0, 1, 2, 255}
		q := must[*Quota](t)(NewQuota(s, 5))
		must[Decision](t)(q.Acquire(ctx, "u", "o3", time.Second, WithPayload(bin)))

		if p := must[[]byte](t)(s.Payload(ctx, "u", "o1")); string(p) != `{"total":42}` {
			t.Fatalf("payload %q", p)
		}
		if p := must[[]byte](t)(s.Payload(ctx, "u", "o2")); p != nil {
			t.Fatalf("payload of a member without one: %q", p)
		}
		if p := must[[]byte](t)(s.Payload(ctx, "u", "o3")); string(p) != string(bin) {
			t.Fatalf("binary payload %q", p)
		}
		// An upsert without WithPayload keeps the payload.
		must[time.Time](t)(s.Add(ctx, "u", "o1", time.Minute))
		if p := must[[]byte](t)(s.Payload(ctx, "u", "o1")); string(p) != `{"total":42}` {
			t.Fatalf("payload after upsert %q", p)
		}
		must[int](t)(s.Remove(ctx, "u", "o1"))
		if _, err := s.Payload(ctx, "u", "o1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("payload of removed member: %v", err)
		}
		pkey := s.shards[s.ShardOf("u")].Payload + "u"
		if b.rdb.HExists(ctx, pkey, "o1").Val() {
			t.Fatal("payload outlived its member")
		}
		clk.Advance(2 * time.Second)
		if _, err := s.Payload(ctx, "u", "o3"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("payload of expired member: %v", err)
		}
		must[time.Time](t)(s.Add(ctx, "u", "o4", time.Minute)) // drops o3
		if b.rdb.HExists(ctx, pkey, "o3").Val() {
			t.Fatal("payload of a dropped member stayed")
		}

		// Without WithPayloadStorage (no flags: the owner key alone is declared;
		// events only: no payload hash is ever written) a live member has
		// no payload.
		for _, opts := range [][]OpenOption{nil, {WithExpiryEvents()}} {
			plain, _ := newTestSet(t, b, opts...)
			must[time.Time](t)(plain.Add(ctx, "u", "m", time.Minute))
			if p, err := plain.Payload(ctx, "u", "m"); err != nil || p != nil {
				t.Fatalf("payload without WithPayloadStorage: %q, %v", p, err)
			}
			if _, err := plain.Payload(ctx, "u", "absent"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("payload of an absent member without WithPayloadStorage: %v", err)
			}
		}
	})
}

// TestExpiryEventsFromWrites checks that with expiry events on, members that
// Add, Acquire or Remove drop produce one event each, and keys keep no TTL.
func TestExpiryEventsFromWrites(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithExpiryEvents(), WithPayloadStorage())
		q := must[*Quota](t)(NewQuota(s, 3))
		must[time.Time](t)(s.Add(ctx, "u", "a", time.Second, WithPayload([]byte("pa"))))
		d := must[time.Time](t)(s.Add(ctx, "u", "b", time.Second))
		must[time.Time](t)(s.Add(ctx, "v", "c", time.Second))
		must[time.Time](t)(s.Add(ctx, "w", "d", time.Second))
		if ttl := b.rdb.PTTL(ctx, s.OwnerKey("u")).Val(); ttl != -1 {
			t.Fatalf("owner key has TTL %v with expiry events on", ttl)
		}
		clk.Advance(time.Second)
		must[time.Time](t)(s.Add(ctx, "u", "x", time.Minute))
		must[Decision](t)(q.Acquire(ctx, "v", "y", time.Minute))
		must[int](t)(s.Remove(ctx, "w", "d"))

		got := map[string]map[string]any{}
		seen := map[string]bool{}
		for sh := 0; sh < s.Shards(); sh++ {
			for _, e := range b.rdb.XRange(ctx, s.shards[sh].Events, "-", "+").Val() {
				m := e.Values["m"].(string)
				if seen[m] {
					t.Fatalf("two events for %q", m)
				}
				seen[m] = true
				got[m] = e.Values
			}
		}
		if len(got) != 4 {
			t.Fatalf("events %v, want 4", got)
		}
		if got["a"]["p"] != "pa" || got["a"]["o"] != "u" {
			t.Fatalf("event of a: %v", got["a"])
		}
		if got["b"]["d"] != formatMillis(d) {
			t.Fatalf("event of b: deadline %v, want %v", got["b"]["d"], formatMillis(d))
		}
		if _, ok := got["b"]["p"]; ok {
			t.Fatalf("event of b carries a payload: %v", got["b"])
		}
	})
}

func formatMillis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// TestIndexTracksEarliestDeadline checks the invariant the sweeper relies
// on: every owner with members has a due-index entry at or before its
// earliest deadline.
func TestIndexTracksEarliestDeadline(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s, clk := newTestSet(t, b, WithShards(1), WithSweepIndex())
		q := must[*Quota](t)(NewQuota(s, 10))
		due := s.shards[0].Due
		check := func(owner string) {
			t.Helper()
			ms := must[[]Member](t)(s.Members(ctx, owner, 0))
			score, err := b.rdb.ZScore(ctx, due, owner).Result()
			if len(ms) == 0 {
				return
			}
			if err != nil {
				t.Fatalf("owner %q has members but no index entry: %v", owner, err)
			}
			if int64(score) > ms[0].Deadline.UnixMilli() {
				t.Fatalf("owner %q indexed at %v, after its earliest deadline %v", owner, int64(score), ms[0].Deadline.UnixMilli())
			}
		}
		must[time.Time](t)(s.Add(ctx, "u", "a", time.Minute))
		check("u")
		must[time.Time](t)(s.Add(ctx, "u", "b", time.Second))
		check("u")
		must[Decision](t)(q.Acquire(ctx, "u", "c", 100*time.Millisecond))
		check("u")
		clk.Advance(time.Second)
		must[Decision](t)(q.Acquire(ctx, "u", "d", 10*time.Millisecond))
		check("u")
		must[time.Time](t)(s.Add(ctx, "u", "a", time.Millisecond))
		check("u")
		// A new owner is indexed at its deadline exactly, and an earlier
		// deadline lowers the entry.
		d := must[time.Time](t)(s.Add(ctx, "fresh", "a", time.Minute))
		if got := b.rdb.ZScore(ctx, due, "fresh").Val(); int64(got) != d.UnixMilli() {
			t.Fatalf("index %v, want %v", int64(got), d.UnixMilli())
		}
		d = must[time.Time](t)(s.Add(ctx, "fresh", "b", time.Second))
		if got := b.rdb.ZScore(ctx, due, "fresh").Val(); int64(got) != d.UnixMilli() {
			t.Fatalf("index %v after an earlier deadline, want %v", int64(got), d.UnixMilli())
		}
	})
}

func realClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	return redistest.Client(t)
}
