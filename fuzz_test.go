package expset

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/internal/redistest"
	"github.com/expset/expset/internal/store"
	"github.com/redis/go-redis/v9"
)

// FuzzKeyEncoding checks the key layout for any owners and set names: two
// distinct owners never share a key; every key of an owner carries its
// shard's hash tag as its Redis Cluster hash tag (the part between the first
// "{" and the first "}" after it, as Redis computes it), so one script's
// keys always share a slot; the shard is in range; and the owner key ends in
// the owner verbatim.
func FuzzKeyEncoding(f *testing.F) {
	for _, s := range []struct {
		o1, o2, name string
		which        uint8
	}{
		{"a", "b", "orders", 0},
		{"{", "}", "n", 1},
		{"a}", "a", "a.b:c/d-e_f", 2},
		{"{a}b", "{a}", "x", 3},
		{"", "x", "", 4},
		{"\x00\xff", "\x00", "{bad}", 5},
		{"o:1", "o", strings.Repeat("n", maxNameLen), 6},
	} {
		f.Add(s.o1, s.o2, s.name, s.which)
	}
	mr := miniredis.RunT(f)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { _ = rdb.Close() })
	shardCounts := []int{1, 2, 3, defaultShards, 1000, maxShards}
	sets := make([]*Set, len(shardCounts))
	for i, n := range shardCounts {
		var err error
		// WithPayloadStorage, so that ownerKeys declares all four keys checked below.
		if sets[i], err = Open(context.Background(), rdb, "keys"+strconv.Itoa(i), WithShards(n), WithPayloadStorage()); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, o1, o2, name string, which uint8) {
		s := sets[int(which)%len(sets)]
		for _, o := range []string{o1, o2} {
			if validateOwner(o) != nil {
				continue
			}
			shard := s.ShardOf(o)
			if shard < 0 || shard >= s.Shards() {
				t.Fatalf("owner %q: shard %d of %d", o, shard, s.Shards())
			}
			tag := s.Name() + ":" + strconv.Itoa(shard)
			sk := s.shards[shard]
			for _, k := range []string{sk.OwnerKey(o), sk.Due, sk.Events, sk.PayloadKey(o), sk.Dead} {
				checkTag(t, k, tag)
			}
			if want := store.KeyPrefix + "{" + tag + "}:o:" + o; s.OwnerKey(o) != want {
				t.Fatalf("owner %q: key %q, want %q", o, s.OwnerKey(o), want)
			}
		}
		if o1 != o2 && validateOwner(o1) == nil && validateOwner(o2) == nil {
			sk1, sk2 := s.shards[s.ShardOf(o1)], s.shards[s.ShardOf(o2)]
			k1, k2 := []string{sk1.OwnerKey(o1), sk1.PayloadKey(o1)}, []string{sk2.OwnerKey(o2), sk2.PayloadKey(o2)}
			if k1[0] == k2[0] || k1[1] == k2[1] || k1[0] == k2[1] || k1[1] == k2[0] {
				t.Fatalf("owners %q and %q share a key: %q, %q", o1, o2, k1, k2)
			}
		}
		if validateName(name) == nil {
			shard := int(which) % 7
			sk := newShardKeys(name, shard)
			for _, k := range []string{sk.Owner + "x", sk.Payload + "x", sk.Due, sk.Events, sk.Dead} {
				checkTag(t, k, name+":"+strconv.Itoa(shard))
			}
			checkTag(t, metaKey(name), name)
			checkTag(t, sweepersKey(name), name)
		}
	})
}

// checkTag fails t unless key's Redis Cluster hash tag is tag and key lies in
// tag's slot.
func checkTag(t *testing.T, key, tag string) {
	t.Helper()
	if got := hashTag(key); got != tag {
		t.Fatalf("key %q has hash tag %q, want %q", key, got, tag)
	}
	if redistest.KeySlot(key) != redistest.KeySlot("{"+tag+"}") {
		t.Fatalf("key %q is in slot %d, its tag %q in %d", key, redistest.KeySlot(key), tag, redistest.KeySlot("{"+tag+"}"))
	}
}

// The operations FuzzQuotaModel draws from its input: three bytes each,
// over a few owners (with braces, colons and a NUL byte) and members, small
// ttls and clock steps (in units: a millisecond on miniredis, a minute on a
// real server, whose key TTLs run on its own clock), three quotas of limit 2
// (plain, WithEvictOldest, WithRefreshOnReacquire) and per-call limits 1-3.
var (
	modelOwners  = []string{"a", "b{x}", "c:\x00"}
	modelMembers = []string{"M", "m0", "m1", "m2", "m3"} // "M" sorts first
	modelTTLs    = []int64{1, 2, 3, 5, 10}
	modelSteps   = []int64{1, 2, 3, 5, 11}
)

const (
	modelLimit  = 2  // the quotas' limit
	maxModelOps = 64 // operations read from one input, at most
)

type opKind uint8

const (
	opAcquire opKind = iota
	opRelease
	opRemove
	opAdd
	opExtend
	opAdvance
	opRead
	numOpKinds
)

var opNames = [...]string{"Acquire", "Release", "Remove", "Add", "Extend", "Advance", "Read"}

type modelOp struct {
	kind          opKind
	owner, member int // indexes into modelOwners, modelMembers
	member2       int // Remove's second member
	ttl           int // index into modelTTLs
	quota         int // 0 plain, 1 WithEvictOldest, 2 WithRefreshOnReacquire
	limit         int // 0: the quota's limit; 1-3: WithLimit
	step          int // index into modelSteps
}

func (op modelOp) String() string {
	switch op.kind {
	case opAdvance:
		return fmt.Sprintf("Advance %d", modelSteps[op.step])
	case opRemove:
		return fmt.Sprintf("Remove %q %q %q", modelOwners[op.owner], modelMembers[op.member], modelMembers[op.member2])
	}
	return fmt.Sprintf("%s %q %q ttl=%d quota=%d limit=%d", opNames[op.kind], modelOwners[op.owner], modelMembers[op.member], modelTTLs[op.ttl], op.quota, op.limit)
}

// decodeOps reads operations three bytes at a time: the kind, then owner and
// member (or the clock step), then ttl, quota and limit (or Remove's second
// member). Trailing bytes are ignored.
func decodeOps(data []byte) []modelOp {
	var ops []modelOp
	for i := 0; i+3 <= len(data) && len(ops) < maxModelOps; i += 3 {
		a, b := int(data[i+1]), int(data[i+2])
		ops = append(ops, modelOp{
			kind:  opKind(data[i] % byte(numOpKinds)),
			owner: a % len(modelOwners), member: a / len(modelOwners) % len(modelMembers),
			step: a % len(modelSteps), member2: b % len(modelMembers),
			ttl: b % len(modelTTLs), quota: b / len(modelTTLs) % 3, limit: b / (3 * len(modelTTLs)) % 4,
		})
	}
	return ops
}

// encodeOps is the inverse of decodeOps, for writing seeds.
func encodeOps(ops ...modelOp) []byte {
	var out []byte
	for _, op := range ops {
		a := op.owner + len(modelOwners)*op.member
		b := op.ttl + len(modelTTLs)*(op.quota+3*op.limit)
		switch op.kind {
		case opAdvance:
			a = op.step
		case opRemove:
			b = op.member2
		}
		out = append(out, byte(op.kind), byte(a), byte(b))
	}
	return out
}

// Seed constructors: o and m index modelOwners and modelMembers, ttl
// modelTTLs.
func acq(o, m, ttl, quota, limit int) modelOp {
	return modelOp{kind: opAcquire, owner: o, member: m, ttl: ttl, quota: quota, limit: limit}
}
func add(o, m, ttl int) modelOp { return modelOp{kind: opAdd, owner: o, member: m, ttl: ttl} }
func ext(o, m, ttl int) modelOp { return modelOp{kind: opExtend, owner: o, member: m, ttl: ttl} }
func rel(o, m int) modelOp      { return modelOp{kind: opRelease, owner: o, member: m} }
func rem(o, m1, m2 int) modelOp { return modelOp{kind: opRemove, owner: o, member: m1, member2: m2} }
func adv(step int) modelOp      { return modelOp{kind: opAdvance, step: step} }
func read(o, m int) modelOp     { return modelOp{kind: opRead, owner: o, member: m} }

// modelSeeds are handwritten sequences: plain `go test` runs them through
// FuzzQuotaModel on miniredis and TestQuotaModelSeeds on every backend.
var modelSeeds = [][]byte{
	// Fill to the limit, deny with RetryAfter, retry, expire, admit.
	encodeOps(acq(0, 1, 2, 0, 0), acq(0, 2, 3, 0, 0), acq(0, 3, 4, 0, 0), acq(0, 1, 4, 0, 0),
		adv(0), acq(0, 3, 4, 0, 0), adv(2), acq(0, 3, 4, 0, 0), read(0, 1), read(0, 3)),
	// Equal deadlines: eviction and RetryAfter break ties by member bytes.
	encodeOps(acq(1, 2, 1, 1, 0), acq(1, 0, 1, 1, 0), acq(1, 1, 1, 1, 0), acq(1, 3, 0, 1, 0),
		acq(1, 4, 0, 0, 0), acq(1, 4, 0, 1, 1)),
	// Refresh on re-acquire, to a later and to an earlier deadline.
	encodeOps(acq(2, 1, 2, 2, 0), acq(2, 2, 4, 2, 0), adv(0), acq(2, 1, 4, 2, 0), acq(2, 2, 0, 2, 0),
		adv(1), read(2, 2), acq(2, 3, 1, 0, 0), adv(4), read(2, 1)),
	// Extend never shortens and cannot revive; Remove counts only live members.
	encodeOps(add(0, 1, 3), add(0, 2, 0), ext(0, 1, 0), ext(0, 1, 4), adv(0), ext(0, 2, 4),
		rem(0, 2, 1), rem(0, 1, 1), add(0, 3, 0), adv(4), rel(0, 3)),
	// Per-call limits over and under the quota's, with an owner over its limit.
	encodeOps(acq(0, 0, 4, 0, 3), acq(0, 1, 4, 0, 3), acq(0, 2, 4, 0, 3), acq(0, 3, 4, 0, 0),
		acq(0, 1, 4, 0, 1), acq(0, 4, 4, 1, 1), adv(3), add(0, 2, 0), acq(0, 2, 2, 2, 2)),
	// A retry of an Acquire that evicted reports the evictions; a release and
	// a new admission at another deadline does not; neither does the plain
	// quota.
	encodeOps(acq(0, 1, 4, 1, 0), acq(0, 2, 4, 1, 0), adv(0), acq(0, 3, 4, 1, 0), acq(0, 3, 4, 1, 0),
		acq(0, 3, 4, 0, 0), rel(0, 3), adv(0), acq(0, 3, 4, 1, 0), acq(0, 3, 3, 1, 0)),
	// Add moves a deadline earlier and the keys expire with their members.
	encodeOps(add(1, 0, 4), add(1, 0, 0), adv(0), read(1, 0), add(2, 4, 1), acq(2, 4, 4, 2, 0),
		adv(3), acq(2, 4, 0, 0, 0), adv(4), adv(4)),
}

// modelRun runs operations against the library and the model side by side.
type modelRun struct {
	t    testing.TB
	rdb  redis.UniversalClient
	mr   *miniredis.Miniredis // moved along with the clock, when not nil
	unit time.Duration
	clk  *fakeClock
	s    *Set
	qs   [3]*Quota
	m    *quotaModel
	done []string // the operations run so far, for failure messages
}

// runModel runs ops on the set called name of rdb (with a fake clock) and
// on a quotaModel, and fails t at the first answer or state that differs.
// With mr, key TTLs are moved along with the clock (FastForward), so keys
// that expire too early lose live members visibly.
func runModel(t testing.TB, rdb redis.UniversalClient, mr *miniredis.Miniredis, name string, unit time.Duration, ops []modelOp) {
	t.Helper()
	clk := newFakeClock()
	s, err := Open(context.Background(), rdb, name, WithClock(clk.Now), WithSweepIndex())
	if err != nil {
		t.Fatal(err)
	}
	r := &modelRun{t: t, rdb: rdb, mr: mr, unit: unit, clk: clk, s: s, m: newQuotaModel(clk.Now())}
	for i, o := range [][]QuotaOption{nil, {WithEvictOldest()}, {WithRefreshOnReacquire()}} {
		r.qs[i] = must[*Quota](t)(NewQuota(s, modelLimit, o...))
	}
	for _, op := range ops {
		r.done = append(r.done, op.String())
		r.step(op)
	}
	for o := range modelOwners {
		r.checkOwner(o)
	}
}

func (r *modelRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("after\n  %s\n%s", strings.Join(r.done, "\n  "), fmt.Sprintf(format, args...))
}

func (r *modelRun) step(op modelOp) {
	r.t.Helper()
	ctx := context.Background()
	owner, member := modelOwners[op.owner], modelMembers[op.member]
	ttl := time.Duration(modelTTLs[op.ttl]) * r.unit
	switch op.kind {
	case opAcquire:
		limit, opts := modelLimit, []AcquireOption(nil)
		if op.limit > 0 {
			limit, opts = op.limit, []AcquireOption{WithLimit(op.limit)}
		}
		got, err := r.qs[op.quota].Acquire(ctx, owner, member, ttl, opts...)
		want := r.m.acquire(owner, member, ttl, limit, op.quota == 1, op.quota == 2)
		if err != nil || !equalDecision(got, want) {
			r.fail("library %+v, %v\nmodel   %+v", got, err, want)
		}
	case opRelease:
		got, err := r.qs[0].Release(ctx, owner, member)
		if want := r.m.remove(owner, member) > 0; err != nil || got != want {
			r.fail("library %v, %v; model %v", got, err, want)
		}
	case opRemove:
		got, err := r.s.Remove(ctx, owner, member, modelMembers[op.member2])
		if want := r.m.remove(owner, member, modelMembers[op.member2]); err != nil || got != want {
			r.fail("library %v, %v; model %v", got, err, want)
		}
	case opAdd:
		got, err := r.s.Add(ctx, owner, member, ttl)
		if want := r.m.add(owner, member, ttl); err != nil || !got.Equal(want) {
			r.fail("library %v, %v; model %v", got, err, want)
		}
	case opExtend:
		got, err := r.s.Extend(ctx, owner, member, ttl)
		want, ok := r.m.extend(owner, member, ttl)
		if ok && (err != nil || !got.Equal(want)) || !ok && !errors.Is(err, ErrNotFound) {
			r.fail("library %v, %v; model %v, found %v", got, err, want, ok)
		}
	case opAdvance:
		d := time.Duration(modelSteps[op.step]) * r.unit
		r.clk.Advance(d)
		r.m.advance(d)
		if r.mr != nil {
			r.mr.FastForward(d)
		}
		for o := range modelOwners {
			r.checkOwner(o)
		}
		return
	case opRead:
		d, ok := r.m.deadline(owner, member)
		got, err := r.s.Deadline(ctx, owner, member)
		if ok && (err != nil || got.UnixMilli() != d) || !ok && !errors.Is(err, ErrNotFound) {
			r.fail("Deadline: library %v, %v; model %v, live %v", got, err, d, ok)
		}
		if has, err := r.s.Contains(ctx, owner, member); err != nil || has != ok {
			r.fail("Contains: library %v, %v; model %v", has, err, ok)
		}
		if got, err := r.s.Members(ctx, owner, 1); err != nil || !equalMembers(got, r.m.live(owner)[:min(1, len(r.m.live(owner)))]) {
			r.fail("Members n=1: library %v, %v; model %v", got, err, r.m.live(owner))
		}
	}
	r.checkOwner(op.owner)
}

// checkOwner compares an owner's live members and count with the model, and
// checks the shard's due index: while the owner key holds members (live or
// not), the index holds the owner at or before the earliest deadline.
func (r *modelRun) checkOwner(o int) {
	r.t.Helper()
	ctx := context.Background()
	owner := modelOwners[o]
	want := r.m.live(owner)
	got, err := r.s.Members(ctx, owner, 0)
	if err != nil || !equalMembers(got, want) {
		r.fail("owner %q: library members %v, %v\nmodel members %v", owner, got, err, want)
	}
	if n, err := r.s.Count(ctx, owner); err != nil || n != len(want) {
		r.fail("owner %q: library count %v, %v; model %d", owner, n, err, len(want))
	}
	raw, err := r.rdb.ZRangeWithScores(ctx, r.s.OwnerKey(owner), 0, 0).Result()
	if err != nil {
		r.fail("ZRANGE: %v", err)
	}
	if len(raw) == 0 {
		return
	}
	due := r.s.shards[r.s.ShardOf(owner)].Due
	score, err := r.rdb.ZScore(ctx, due, owner).Result()
	if err != nil || score > raw[0].Score {
		r.fail("owner %q: index %s holds %v (%v), earliest deadline %v", owner, due, int64(score), err, int64(raw[0].Score))
	}
}

// FuzzQuotaModel runs operations decoded from the input on a Set and its
// quotas on miniredis (fake clock, key TTLs moved with it) and on
// quotaModel, and compares every answer (Decision fields, counts, deadlines,
// Members lists) and the live members after each step.
func FuzzQuotaModel(f *testing.F) {
	for _, s := range modelSeeds {
		f.Add(s)
	}
	mr := miniredis.RunT(f)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { _ = rdb.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		mr.FlushAll()
		runModel(t, rdb, mr, "model", time.Millisecond, decodeOps(data))
	})
}

// TestQuotaModelSeeds runs the handwritten sequences on every backend, with
// minutes for units: real Redis formats numbers in Lua differently from
// miniredis, and the cluster checks keys.
func TestQuotaModelSeeds(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b backend) {
		for i, seed := range modelSeeds {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				runModel(t, b.rdb, nil, uniqueName(t, b.rdb), time.Minute, decodeOps(seed))
			})
		}
	})
}
