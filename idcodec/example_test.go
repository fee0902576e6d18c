package idcodec_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset/idcodec"
	"github.com/redis/go-redis/v9"
)

// exampleRedis returns a client of a miniredis server, and a func that
// closes both.
func exampleRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { _ = rdb.Close(); mr.Close() }
}

// Raw snowflake IDs collide as scores; the codec's scores are exact, and its
// members order the IDs that share a score.
func ExampleCodec_Score() {
	codec, err := idcodec.New(idcodec.Twitter)
	if err != nil {
		panic(err)
	}
	a, b := int64(215857550229364736), int64(215857550229364737)
	fmt.Println("raw scores equal:", float64(a) == float64(b))
	for _, id := range []int64{a, b} {
		score, err := codec.Score(id)
		if err != nil {
			panic(err)
		}
		fmt.Println(codec.Member(id), strconv.FormatFloat(score, 'f', -1, 64), codec.Time(id).Format(time.RFC3339Nano))
	}
	_, err = codec.Score(-1)
	fmt.Println(err)
	// Output:
	// raw scores equal: true
	// 0215857550229364736 210798388895864 2012-06-21T17:23:45.071Z
	// 0215857550229364737 210798388895864 2012-06-21T17:23:45.071Z
	// expset: invalid argument: snowflake id -1 is negative
}

// Offline messages per user, scored by message ID and pruned after 15 days
// with one ZREMRANGEBYSCORE.
func ExampleCodec_ScoreAt() {
	ctx := context.Background()
	rdb, done := exampleRedis() // your *redis.Client; here, one of miniredis
	defer done()

	codec, err := idcodec.New(idcodec.Twitter)
	if err != nil {
		panic(err)
	}
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	key := "inbox:alice"
	for daysAgo := 20; daysAgo >= 1; daysAgo-- {
		// A message ID as bwmarrin/snowflake makes it: node 7, sequence 0.
		ms := now.AddDate(0, 0, -daysAgo).Sub(idcodec.Twitter.Epoch).Milliseconds()
		id := ms<<22 | 7<<12
		score, err := codec.Score(id)
		if err != nil {
			panic(err)
		}
		if err := rdb.ZAdd(ctx, key, redis.Z{Score: score, Member: codec.Member(id)}).Err(); err != nil {
			panic(err)
		}
	}

	// Everything scored below ScoreAt(cutoff) was sent before the cutoff.
	// Send the score as an exact decimal string (Lua's tostring would not be).
	cutoff := strconv.FormatFloat(codec.ScoreAt(now.AddDate(0, 0, -15)), 'f', -1, 64)
	removed, err := rdb.ZRemRangeByScore(ctx, key, "-inf", "("+cutoff).Result()
	if err != nil {
		panic(err)
	}
	oldest, err := rdb.ZRange(ctx, key, 0, 0).Result()
	if err != nil {
		panic(err)
	}
	id, err := codec.ParseMember(oldest[0])
	if err != nil {
		panic(err)
	}
	fmt.Println("cutoff score:", cutoff)
	fmt.Println("removed:", removed)
	fmt.Println("oldest kept:", codec.Time(id).Format(time.DateTime))
	// Output:
	// cutoff score: 1738480948604928
	// removed: 5
	// oldest kept: 2024-04-16 12:00:00
}

// Cursor pagination: After reads the page that follows the last ID of the
// previous one, also among IDs that share a score.
func ExampleCodec_After() {
	ctx := context.Background()
	rdb, done := exampleRedis() // your *redis.Client; here, one of miniredis
	defer done()

	codec, err := idcodec.New(idcodec.Twitter)
	if err != nil {
		panic(err)
	}
	// Three nodes make three IDs each in the same millisecond.
	ms := int64(51464450414)
	for _, node := range []int64{9, 1, 5} {
		for seq := range int64(3) {
			id := ms<<22 | node<<12 | seq
			score, err := codec.Score(id)
			if err != nil {
				panic(err)
			}
			if err := rdb.ZAdd(ctx, "feed", redis.Z{Score: score, Member: codec.Member(id)}).Err(); err != nil {
				panic(err)
			}
		}
	}

	cursor := int64(-1) // before the first ID
	for page := 1; ; page++ {
		ids, err := codec.After(ctx, rdb, "feed", cursor, 4)
		if err != nil {
			panic(err)
		}
		if len(ids) == 0 {
			break
		}
		var cells []string
		for _, id := range ids {
			cells = append(cells, fmt.Sprintf("node %d seq %d", id>>12&1023, id&4095))
		}
		fmt.Printf("page %d: %s\n", page, strings.Join(cells, ", "))
		cursor = ids[len(ids)-1]
	}
	// Output:
	// page 1: node 1 seq 0, node 1 seq 1, node 1 seq 2, node 5 seq 0
	// page 2: node 5 seq 1, node 5 seq 2, node 9 seq 0, node 9 seq 1
	// page 3: node 9 seq 2
}
