package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

var webLarge = flag.Bool("web-large", false, "TestWebLarge: fill a real server with 1,000,000 members and 100,000 dead letters and log how long each view of the page takes")

// TestWebLarge measures, and asserts nothing about time: run it with
// go test -run TestWebLarge -web-large -v ./cmd/expset/
func TestWebLarge(t *testing.T) {
	if !*webLarge {
		t.Skip("a measurement: run with -web-large")
	}
	rdb := redistest.Client(t)
	ctx := context.Background()
	name := "web-large-" + uuid.NewString()[:8]
	set, err := expset.Open(ctx, rdb, name, expset.WithShards(16), expset.WithExpiryEvents(), expset.WithPayloadStorage())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { expset.Drop(context.Background(), rdb, name) })
	st, err := set.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 100,000 owners of 10 members each, written straight in the key
	// layout (an Add per member would take minutes); one owner in ten has
	// its members due.
	start := time.Now()
	now := time.Now().UnixMilli()
	pipe := rdb.Pipeline()
	for o := 0; o < 100000; o++ {
		owner := "user-" + strconv.Itoa(o)
		shard := set.ShardOf(owner)
		base := now + 3600000
		if o%10 == 0 {
			base = now - 60000
		}
		zs := make([]redis.Z, 10)
		for m := range zs {
			zs[m] = redis.Z{Score: float64(base + int64(m)), Member: fmt.Sprintf("order-%d-%d", o, m)}
		}
		pipe.ZAdd(ctx, set.OwnerKey(owner), zs...)
		pipe.ZAdd(ctx, fmt.Sprintf("expset:{%s:%d}:due", name, shard), redis.Z{Score: float64(base), Member: owner})
		if pipe.Len() >= 2000 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < 100000; i++ {
		group, text := "billing", "gateway timeout"
		if i%10 == 0 {
			group, text = "email", "no address"
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: st[i%16].DeadLettersKey, Values: []any{
			"o", "user-" + strconv.Itoa(i), "m", "order-" + strconv.Itoa(i), "d", strconv.FormatInt(now, 10),
			"p", `{"n":` + strconv.Itoa(i) + `}`, "g", group, "a", "5", "id", "1-1", "c", "worker-1", "err", text,
		}})
		if pipe.Len() >= 2000 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled 1,000,000 members of 100,000 owners and 100,000 dead letters in %v", time.Since(start).Round(time.Millisecond))

	f := newWebFix(t, rdb, set, webOpts{})
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The last page of the dead letters of shard 15, reached by its cursor.
	last, err := rdb.XRevRangeN(ctx, st[15].DeadLettersKey, "+", "-", 60).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{
		"/", "/set?s=" + name, "/owner?s=" + name + "&o=user-10",
		"/dead?s=" + name, "/dead?s=" + name + "&after=15/" + last[len(last)-1].ID,
		"/dead?s=" + name + "&group=email", "/dead?s=" + name + "&err=no+address&shard=3", "/dead?s=" + name + "&owner=user-99999",
		"/letter?s=" + name + "&ref=15/" + last[0].ID,
	} {
		var best time.Duration
		for i := 0; i < 3; i++ {
			t0 := time.Now()
			code, body := f.get(v)
			d := time.Since(t0)
			if code != http.StatusOK {
				t.Fatalf("%s: %d\n%s", v, code, body)
			}
			if i == 0 || d < best {
				best = d
			}
		}
		t.Logf("%-70s best of 3: %v", v, best.Round(100*time.Microsecond))
	}
	// The server's own time in the filter script (other tests share the
	// server: run this one alone).
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_xlen:") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
