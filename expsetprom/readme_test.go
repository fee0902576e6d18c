package expsetprom

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// TestReadmeListsEveryMetric checks that README.md names every metric the
// two collectors describe, and no metric they do not.
func TestReadmeListsEveryMetric(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	set, err := expset.Open(context.Background(), rdb, "readme")
	if err != nil {
		t.Fatal(err)
	}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	described := map[string]bool{}
	for _, c := range []prometheus.Collector{NewCollector(), NewStatsCollector(set)} {
		ch := make(chan *prometheus.Desc, 100)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no fqName in %s", d)
			}
			if m[1] == "expset_shard_stats" { // the failed read's Desc: no samples
				continue
			}
			described[m[1]] = true
			if !strings.Contains(string(md), "`"+m[1]+"`") {
				t.Errorf("README.md does not list %s", m[1])
			}
		}
	}
	for _, m := range regexp.MustCompile("`(expset_[a-z_]+)`").FindAllStringSubmatch(string(md), -1) {
		if !described[m[1]] {
			t.Errorf("README.md lists %s, which no collector describes", m[1])
		}
	}
}
