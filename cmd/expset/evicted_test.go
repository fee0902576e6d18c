package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/expset/expset"
	"github.com/expset/expset/internal/redistest"
)

// TestStatsServerEvictedKeys: on a server whose maxmemory-policy evicted
// (volatile-random: allkeys-* would evict the set's configuration too)
// keys, stats opens the set all the same and shows the count, in JSON per
// shard and in the text with a warning; on one that evicted none, 0 and no
// warning.
func TestStatsServerEvictedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	url := "redis://" + srv.Addr
	if _, err := expset.Open(ctx, rdb, "orders", expset.WithShards(2)); err != nil {
		t.Fatal(err)
	}
	stats := func() (statsReport, string) {
		t.Helper()
		code, out, errs := runCLI(t, "stats", "--json", "--redis", url, "orders")
		if code != 0 {
			t.Fatalf("stats --json: exit %d: %s", code, errs)
		}
		var rep statsReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("stats --json: %v\n%s", err, out)
		}
		code, text, errs := runCLI(t, "stats", "--redis", url, "orders")
		if code != 0 {
			t.Fatalf("stats: exit %d: %s", code, errs)
		}
		return rep, text
	}
	if rep, text := stats(); rep.Total.Evicted != 0 || strings.Contains(text, "evicted") {
		t.Errorf("a server that evicted nothing: %+v\n%s", rep.Total, text)
	}

	for _, kv := range [][2]string{{"maxmemory-policy", "volatile-random"}, {"maxmemory", "3mb"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	junk := strings.Repeat("x", 1024)
	for round := range 10 {
		pipe := rdb.Pipeline()
		for i := range 1000 {
			pipe.Set(ctx, fmt.Sprintf("junk:%d:%d", round, i), junk, time.Hour)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rep, text := stats()
	info, err := redistest.Info(ctx, rdb, "stats") // read after: the count only grows
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Shards {
		if n, _ := strconv.ParseInt(info["evicted_keys"], 10, 64); s.Evicted == 0 || s.Evicted > n {
			t.Errorf("shard %d: server_evicted_keys %d, INFO says %s", s.Shard, s.Evicted, info["evicted_keys"])
		}
	}
	if !strings.Contains(text, "evicted") || !strings.Contains(text, "noeviction") {
		t.Errorf("stats does not warn of the evictions:\n%s", text)
	}
}
