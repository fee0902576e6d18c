package idcodec

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// forEachBackend runs f against a real redis-server and against miniredis,
// in parallel (each test uses keys of its own: codecKey).
func forEachBackend(t *testing.T, f func(t *testing.T, rdb *redis.Client)) {
	t.Run("redis", func(t *testing.T) { t.Parallel(); f(t, redistest.Client(t)) })
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		f(t, rdb)
	})
}

// codecKey returns a key of its own for t, deleted when t ends.
func codecKey(t *testing.T, rdb *redis.Client) string {
	key := "expset-test:idcodec:{" + uuid.NewString() + "}:" + t.Name()
	t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })
	return key
}

// zaddIDs adds ids to key with the scores and members of c.
func zaddIDs(t *testing.T, rdb *redis.Client, c *Codec, key string, ids []int64) {
	t.Helper()
	zs := make([]redis.Z, len(ids))
	for i, id := range ids {
		s, err := c.Score(id)
		if err != nil {
			t.Fatal(err)
		}
		zs[i] = redis.Z{Score: s, Member: c.Member(id)}
	}
	for len(zs) > 0 {
		n := min(len(zs), 1000)
		if err := rdb.ZAdd(context.Background(), key, zs[:n]...).Err(); err != nil {
			t.Fatal(err)
		}
		zs = zs[n:]
	}
}

// zaddScript adds score-member pairs given as exact decimal strings, and
// returns each score as ZSCORE reads it inside the script.
//
// KEYS[1]: the sorted set. ARGV: score1, member1, score2, member2, ...
// Returns: the scores read back, as strings.
var zaddScript = redis.NewScript(`
local out = {}
for i = 1, #ARGV, 2 do
	redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
	out[#out + 1] = redis.call('ZSCORE', KEYS[1], ARGV[i + 1])
end
return out
`)

// cornerIDs returns IDs of l at the corners of its fields.
func cornerIDs(l Layout) []int64 {
	var ids []int64
	for _, tick := range []uint64{0, 1, 1 << (l.TimeBits - 1), fieldMax(l.TimeBits)} {
		for _, node := range []uint64{0, 1, fieldMax(l.NodeBits)} {
			for _, seq := range []uint64{0, 1, fieldMax(l.SeqBits)} {
				ids = append(ids, compose(l, tick, node, seq))
			}
		}
	}
	return ids
}

// TestCodecRedisScoresBitExact writes codec scores through go-redis and
// through Lua, and checks that ZSCORE and ZRANGE WITHSCORES return the very
// doubles sent.
func TestCodecRedisScoresBitExact(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		forEachCodec(t, func(t *testing.T, c *Codec) {
			ids := append(cornerIDs(c.layout), 215857550229364736, 215857550229364737)
			want := map[string]float64{}
			var args []any
			for _, id := range ids {
				s, err := c.Score(id)
				if err != nil {
					t.Fatal(err)
				}
				want[c.Member(id)] = s
				args = append(args, formatScore(s), c.Member(id))
			}
			viaGo, viaLua := codecKey(t, rdb), codecKey(t, rdb)
			zaddIDs(t, rdb, c, viaGo, ids)
			got, err := zaddScript.Run(ctx, rdb, []string{viaLua}, args...).StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			for i, g := range got {
				f, err := strconv.ParseFloat(g, 64)
				if w := want[args[2*i+1].(string)]; err != nil || math.Float64bits(f) != math.Float64bits(w) {
					t.Errorf("ZSCORE in Lua = %q, want %v", g, formatScore(w))
				}
			}
			for _, key := range []string{viaGo, viaLua} {
				for m, w := range want {
					s, err := rdb.ZScore(ctx, key, m).Result()
					if err != nil || math.Float64bits(s) != math.Float64bits(w) {
						t.Errorf("%s: ZSCORE %s = %v, %v; want %v", key, m, s, err, formatScore(w))
					}
				}
				zs, err := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
				if err != nil || len(zs) != len(want) {
					t.Fatalf("ZRANGE WITHSCORES: %d members, %v; want %d", len(zs), err, len(want))
				}
				for _, z := range zs {
					if w := want[z.Member.(string)]; math.Float64bits(z.Score) != math.Float64bits(w) {
						t.Errorf("%s: ZRANGE WITHSCORES %v = %v, want %v", key, z.Member, formatScore(z.Score), formatScore(w))
					}
				}
			}
		})
	})
}

// burstIDs returns IDs made in the same tick by several nodes, each node
// making several, plus a few in the ticks around it, shuffled.
func burstIDs(l Layout, tick uint64) []int64 {
	var ids []int64
	for _, node := range []uint64{0, 1, 2, 7, fieldMax(l.NodeBits) / 2, fieldMax(l.NodeBits)} {
		for _, seq := range []uint64{0, 1, 2, 3, 100, fieldMax(l.SeqBits) / 2, fieldMax(l.SeqBits)/2 + 1, fieldMax(l.SeqBits)} {
			ids = append(ids, compose(l, tick, node, seq))
		}
		ids = append(ids, compose(l, tick-1, node, fieldMax(l.SeqBits)), compose(l, tick+1, node, 0))
	}
	rand.New(rand.NewPCG(9, 10)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

func parseCodecMembers(t *testing.T, c *Codec, ms []string) []int64 {
	t.Helper()
	ids := make([]int64, len(ms))
	for i, m := range ms {
		id, err := c.ParseMember(m)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// TestCodecRedisOrder checks that ZRANGE lists the IDs of several nodes in
// one millisecond in exactly ID order, with every Ordered codec.
func TestCodecRedisOrder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, rdb *redis.Client) {
		forEachCodec(t, func(t *testing.T, c *Codec) {
			if !c.ordered() {
				t.Skip("this strategy does not promise ID order")
			}
			ids := burstIDs(c.layout, 1<<30)
			key := codecKey(t, rdb)
			zaddIDs(t, rdb, c, key, ids)
			ms, err := rdb.ZRange(context.Background(), key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			got, want := parseCodecMembers(t, c, ms), slices.Sorted(slices.Values(ids))
			if !slices.Equal(got, want) {
				t.Errorf("ZRANGE order\n got %v\nwant %v", got, want)
			}
		})
	})
}

// TestCodecRedisRawIDsFail shows what the codec fixes: raw IDs as scores
// collide, so ZSCORE loses the ID and a cursor by score skips IDs, while
// the codec's scores come back exact and After visits every ID.
func TestCodecRedisRawIDsFail(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		c := mustCodec(t, Twitter)
		ids := slices.Sorted(slices.Values(burstIDs(Twitter, 51464450414))) // the tick of 215857550229364736
		raw, coded := codecKey(t, rdb), codecKey(t, rdb)
		for _, id := range ids {
			if err := rdb.ZAdd(ctx, raw, redis.Z{Score: float64(id), Member: strconv.FormatInt(id, 10)}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		zaddIDs(t, rdb, c, coded, ids)

		lossy := 0
		for _, id := range ids {
			s, err := rdb.ZScore(ctx, raw, strconv.FormatInt(id, 10)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int64(s) != id {
				lossy++
			}
		}
		if lossy == 0 {
			t.Fatal("raw scores came back exact: this test no longer shows the bug")
		}

		// Naive cursor over raw scores: the IDs after x are those scored above x.
		var seen []int64
		cursor := "-inf"
		for {
			ms, err := rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: raw, Start: cursor, Stop: "+inf", ByScore: true, Count: 5}).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) == 0 {
				break
			}
			for _, m := range ms {
				id, _ := strconv.ParseInt(m, 10, 64)
				seen = append(seen, id)
			}
			last, _ := strconv.ParseInt(ms[len(ms)-1], 10, 64)
			cursor = "(" + formatScore(float64(last))
		}
		if len(seen) >= len(ids) {
			t.Fatalf("the raw cursor saw %d of %d IDs: this test no longer shows the bug", len(seen), len(ids))
		}
		t.Logf("raw IDs as scores: %d of %d ZSCOREs lossy, a score cursor saw %d of %d IDs", lossy, len(ids), len(seen), len(ids))

		// The same reads with the codec.
		for _, id := range ids {
			s, err := rdb.ZScore(ctx, coded, c.Member(id)).Result()
			if want, _ := c.Score(id); err != nil || s != want {
				t.Errorf("ZSCORE %d = %v, %v; want %v", id, s, err, want)
			}
		}
		if got := pageAll(t, c, rdb, coded, 5); !slices.Equal(got, ids) {
			t.Errorf("After visited\n %v\nwant\n %v", got, ids)
		}
	})
}

// pageAll reads key page by page with After.
func pageAll(t *testing.T, c *Codec, rdb redis.SortedSetCmdable, key string, page int64) []int64 {
	t.Helper()
	var all []int64
	seen := map[int64]bool{}
	cursor := int64(-1)
	for {
		ids, err := c.After(context.Background(), rdb, key, cursor, page)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(ids)) > page {
			t.Fatalf("After(%d, %d) returned %d IDs", cursor, page, len(ids))
		}
		if len(ids) == 0 {
			return all
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("After(%d, %d) visited %d again", cursor, page, id)
			}
			seen[id] = true
		}
		all = append(all, ids...)
		cursor = ids[len(ids)-1]
	}
}

// countingZSet counts the ZRANGE calls of After.
type countingZSet struct {
	redis.SortedSetCmdable
	calls int
}

func (c *countingZSet) ZRangeArgsWithScores(ctx context.Context, z redis.ZRangeArgs) *redis.ZSliceCmd {
	c.calls++
	return c.SortedSetCmdable.ZRangeArgsWithScores(ctx, z)
}

// TestCodecRedisAfter checks that cursor pagination visits every ID once, in
// the set's order, also where hundreds of IDs share a score.
func TestCodecRedisAfter(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		forEachCodec(t, func(t *testing.T, c *Codec) {
			l := c.layout
			ids := burstIDs(l, 1<<30)
			for seq := range uint64(300) { // one node's burst: one score with KeepTopBits
				ids = append(ids, compose(l, 1<<30+5, 3, seq))
			}
			key := codecKey(t, rdb)
			zaddIDs(t, rdb, c, key, ids)
			ms, err := rdb.ZRange(ctx, key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			setOrder := parseCodecMembers(t, c, ms)
			if c.ordered() && !slices.IsSorted(setOrder) {
				t.Fatal("set order is not ID order")
			}
			for _, page := range []int64{1, 7, 20, 1000} {
				if got := pageAll(t, c, rdb, key, page); !slices.Equal(got, setOrder) {
					t.Errorf("page %d: After visited %d IDs, want the %d of the set in order", page, len(got), len(setOrder))
				}
			}

			// A cursor that is not in the set: its successors all the same.
			gone := setOrder[len(setOrder)/2]
			if err := rdb.ZRem(ctx, key, c.Member(gone)).Err(); err != nil {
				t.Fatal(err)
			}
			got, err := c.After(ctx, rdb, key, gone, 3)
			if want := setOrder[len(setOrder)/2+1 : len(setOrder)/2+4]; err != nil || !slices.Equal(got, want) {
				t.Errorf("After(removed %d) = %v, %v; want %v", gone, got, err, want)
			}

			// One round trip when few IDs share the cursor's score.
			cz := &countingZSet{SortedSetCmdable: rdb}
			x := compose(l, 1<<30+1, 0, 0)
			if _, err := c.After(ctx, cz, key, x, 5); err != nil || cz.calls != 1 {
				t.Errorf("After(%d) took %d round trips, %v", x, cz.calls, err)
			}
			// Reads double while the burst's shared score holds only IDs up to
			// the cursor: 150 of them take a few round trips, not 25.
			cz.calls = 0
			x = compose(l, 1<<30+5, 3, 150)
			got, err = c.After(ctx, cz, key, x, 5)
			if err != nil || len(got) != 5 || cz.calls > 6 {
				t.Errorf("After(%d in a burst) = %v, %v in %d round trips", x, got, err, cz.calls)
			}
		})

		c := mustCodec(t, Twitter)
		key := codecKey(t, rdb)
		if ids, err := c.After(ctx, rdb, key, -1, 10); err != nil || ids != nil {
			t.Errorf("After on a missing key = %v, %v", ids, err)
		}
		zaddIDs(t, rdb, c, key, []int64{1, 2, 3})
		if ids, err := c.After(ctx, rdb, key, 1, 0); err != nil || ids != nil {
			t.Errorf("After with count 0 = %v, %v", ids, err)
		}
		if _, err := c.After(ctx, rdb, key, 1, 10); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "not-an-id"}).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.After(ctx, rdb, key, -1, 10); !errors.Is(err, expset.ErrInvalidArgument) {
			t.Errorf("After over a foreign member: %v, want expset.ErrInvalidArgument", err)
		}
		if err := rdb.Set(ctx, key, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.After(ctx, rdb, key, -1, 10); err == nil {
			t.Error("After on a string key: no error")
		}
	})
}

// TestCodecRedisPrune removes everything older than a cutoff with one
// ZREMRANGEBYSCORE to ScoreAt(cutoff), passed as an exact decimal string,
// from Go and from Lua.
func TestCodecRedisPrune(t *testing.T) {
	t.Parallel()
	prune := redis.NewScript(`return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])`)
	forEachBackend(t, func(t *testing.T, rdb *redis.Client) {
		ctx := context.Background()
		forEachCodec(t, func(t *testing.T, c *Codec) {
			l := c.layout
			cutoff := l.Epoch.AddDate(20, 0, 0).Add(l.TimeUnit / 2)
			tick := uint64(cutoff.Sub(l.Epoch) / l.TimeUnit)
			ids := burstIDs(l, tick)
			for d := range 20 {
				at := cutoff.AddDate(0, 0, d-10)
				ids = append(ids, compose(l, uint64(at.Sub(l.Epoch)/l.TimeUnit), 3, 5))
			}
			var keep []int64
			for _, id := range ids {
				if !c.Time(id).Add(l.TimeUnit).After(cutoff) { // its tick ended by the cutoff
					continue
				}
				keep = append(keep, id)
			}
			bound := formatScore(c.ScoreAt(cutoff))
			for _, viaLua := range []bool{false, true} {
				key := codecKey(t, rdb)
				zaddIDs(t, rdb, c, key, ids)
				var err error
				if viaLua {
					err = prune.Run(ctx, rdb, []string{key}, bound).Err()
				} else {
					err = rdb.ZRemRangeByScore(ctx, key, "-inf", "("+bound).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
				ms, err := rdb.ZRange(ctx, key, 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				got := parseCodecMembers(t, c, ms)
				slices.Sort(got)
				if want := slices.Sorted(slices.Values(keep)); !slices.Equal(got, want) {
					t.Errorf("lua %v: kept %d IDs, want %d", viaLua, len(got), len(want))
				}
			}
		})
	})
}

// TestCodecAfterCount checks that After rejects a count above maxAfterCount
// with expset.ErrInvalidArgument, without a round trip, and that a count up to it
// allocates by what Redis returns: a count of maxAfterCount over three IDs.
func TestCodecAfterCount(t *testing.T) {
	t.Parallel()
	redistest.EachBackend(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := mustCodec(t, Twitter)
		key := "expset-test:idcodec:{" + uuid.NewString() + "}"
		t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })
		for _, id := range []int64{1, 2, 3} {
			s, err := c.Score(id)
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.ZAdd(ctx, key, redis.Z{Score: s, Member: c.Member(id)}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range []int64{math.MaxInt64, 1 << 40, maxAfterCount + 1} {
			cz := &countingZSet{SortedSetCmdable: rdb}
			ids, err := c.After(ctx, cz, key, -1, n)
			if !errors.Is(err, expset.ErrInvalidArgument) || ids != nil || cz.calls != 0 {
				t.Errorf("After(count %d) = %v, %v after %d reads; want expset.ErrInvalidArgument and no read", n, ids, err, cz.calls)
			}
		}
		for _, n := range []int64{maxAfterCount, 3, 2} {
			ids, err := c.After(ctx, rdb, key, -1, n)
			if want := []int64{1, 2, 3}[:min(n, 3)]; err != nil || !slices.Equal(ids, want) || int64(cap(ids)) > 3 {
				t.Errorf("After(count %d) = %v (cap %d), %v; want %v", n, ids, cap(ids), err, want)
			}
		}
		for _, n := range []int64{0, -1, math.MinInt64} {
			if ids, err := c.After(ctx, rdb, key, -1, n); ids != nil || err != nil {
				t.Errorf("After(count %d) = %v, %v; want nil, nil", n, ids, err)
			}
		}
	})
}

// FuzzCodecAfter calls After with any cursor and any count, extreme ones
// included, on a small set in miniredis: it never panics, rejects a count
// above maxAfterCount with expset.ErrInvalidArgument, returns at most count IDs, each
// after the cursor, and otherwise fails only with expset.ErrInvalidArgument (a cursor
// past the horizon).
func FuzzCodecAfter(f *testing.F) {
	for _, s := range [][2]int64{
		{-1, math.MaxInt64}, {-1, 1 << 40}, {5, -1}, {5, math.MinInt64}, {0, maxAfterCount},
		{0, maxAfterCount + 1}, {math.MaxInt64, 2}, {3, 1},
	} {
		f.Add(s[0], s[1])
	}
	mr := miniredis.RunT(f)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { _ = rdb.Close() })
	c := mustCodec(f, Twitter)
	ids := []int64{0, 1, 2, 3, 1 << 22, 1<<22 + 1, 1 << 40}
	zs := make([]redis.Z, len(ids))
	for i, id := range ids {
		s, err := c.Score(id)
		if err != nil {
			f.Fatal(err)
		}
		zs[i] = redis.Z{Score: s, Member: c.Member(id)}
	}
	if err := rdb.ZAdd(context.Background(), "k", zs...).Err(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, count int64) {
		got, err := c.After(context.Background(), rdb, "k", id, count)
		switch {
		case count > maxAfterCount:
			if !errors.Is(err, expset.ErrInvalidArgument) {
				t.Fatalf("After(%d, count %d): %v, want expset.ErrInvalidArgument", id, count, err)
			}
		case err != nil:
			if !errors.Is(err, expset.ErrInvalidArgument) {
				t.Fatalf("After(%d, count %d): %v", id, count, err)
			}
		case int64(len(got)) > max(count, 0):
			t.Fatalf("After(%d, count %d) returned %d IDs", id, count, len(got))
		}
		for _, g := range got {
			if g <= id {
				t.Fatalf("After(%d, count %d) returned %d", id, count, g)
			}
		}
	})
}
