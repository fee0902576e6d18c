package beanstalk

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/expset/expset/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkBeanstalk measures round trips and jobs/s of Debian's beanstalkd
// (in memory) and of the front on a real Redis, through the same raw
// protocol client (64-byte jobs):
//
//   - put: one client puts jobs, one round trip each;
//   - reserve-delete: one client reserves and deletes jobs put beforehand
//     (two round trips a job);
//   - cycle: 16 clients at once put, reserve and delete (three round trips a
//     job); ns/op is per job, and jobs/s the whole queue's rate.
//
// On the front, redis-µs/job is the Redis server's own time for the
// scripts a job cost (EVALSHA in INFO commandstats, the commands inside them
// included), and scripts/job their number.
//
//	go test -run '^$' -bench BenchmarkBeanstalk -benchtime 20000x ./cmd/expset/internal/beanstalk/
func BenchmarkBeanstalk(b *testing.B) {
	body := strings.Repeat("x", 64)
	put := fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", len(body), body)
	servers := []struct {
		name  string
		start func(b *testing.B) (string, redis.UniversalClient)
	}{
		{"beanstalkd", func(b *testing.B) (string, redis.UniversalClient) {
			return startBeanstalkd(b), nil
		}},
		{"front-redis", func(b *testing.B) (string, redis.UniversalClient) {
			rdb := redistest.Client(b)
			return startFront(b, rdb, testPrefix(b), Config{}), rdb
		}},
	}
	for _, srv := range servers {
		b.Run(srv.name+"/put", func(b *testing.B) {
			addr, rdb := srv.start(b)
			c := dial(b, addr)
			c.do("use put\r\n")
			before := serverTime(b, rdb)
			b.ResetTimer()
			for range b.N {
				if r := c.do(put); !strings.HasPrefix(r, "INSERTED") {
					b.Fatal(r)
				}
			}
			b.StopTimer()
			reportServer(b, rdb, before, b.N)
		})
		b.Run(srv.name+"/reserve-delete", func(b *testing.B) {
			addr, rdb := srv.start(b)
			c := dial(b, addr)
			c.do("use rd\r\n")
			c.do("watch rd\r\n")
			c.do("ignore default\r\n")
			for range b.N {
				c.do(put)
			}
			before := serverTime(b, rdb)
			b.ResetTimer()
			for range b.N {
				r := c.do("reserve-with-timeout 0\r\n")
				if !strings.HasPrefix(r, "RESERVED") {
					b.Fatal(r)
				}
				if r := c.do("delete " + strings.Fields(r)[1] + "\r\n"); r != "DELETED\r\n" {
					b.Fatal(r)
				}
			}
			b.StopTimer()
			reportServer(b, rdb, before, b.N)
		})
		b.Run(srv.name+"/cycle", func(b *testing.B) {
			addr, rdb := srv.start(b)
			before := serverTime(b, rdb)
			var tubes atomic.Int64
			b.SetParallelism(8) // 16 clients on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c := dial(b, addr)
				tube := fmt.Sprintf("cycle%d", tubes.Add(1))
				c.do("use " + tube + "\r\n")
				c.do("watch " + tube + "\r\n")
				for pb.Next() {
					c.do(put)
					r := c.do("reserve-with-timeout 1\r\n")
					if !strings.HasPrefix(r, "RESERVED") {
						b.Error(r)
						return
					}
					c.do("delete " + strings.Fields(r)[1] + "\r\n")
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			reportServer(b, rdb, before, b.N)
		})
	}
}

// serverCounts is what the Redis server has run so far: calls and µs.
type serverCounts struct{ calls, usec float64 }

var countedCommands = []string{"evalsha", "eval"}

func serverTime(b *testing.B, rdb redis.UniversalClient) serverCounts {
	var s serverCounts
	if rdb == nil {
		return s
	}
	for _, cmd := range countedCommands {
		n, per, err := redistest.CommandStats(context.Background(), rdb, cmd)
		if err != nil {
			b.Fatal(err)
		}
		s.calls += float64(n)
		s.usec += float64(n) * per
	}
	return s
}

func reportServer(b *testing.B, rdb redis.UniversalClient, before serverCounts, jobs int) {
	if rdb == nil {
		return
	}
	after := serverTime(b, rdb)
	b.ReportMetric((after.usec-before.usec)/float64(jobs), "redis-µs/job")
	b.ReportMetric((after.calls-before.calls)/float64(jobs), "scripts/job")
}
