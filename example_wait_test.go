package expset_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/expset/expset"
	"github.com/redis/go-redis/v9"
)

// A worker pool where each tenant runs at most 2 jobs at once: a worker
// that picks a job of a tenant already running 2 waits (AcquireWait) until
// one of them ends, and the tenant's jobs start in the order their workers
// asked. The job's ttl bounds how long a crashed worker can hold its slot.
func ExampleQuota_AcquireWait() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	running, err := expset.New(rdb, "running-jobs")
	if err != nil {
		panic(err)
	}
	perTenant, err := expset.NewQuota(running, 2)
	if err != nil {
		panic(err)
	}

	type job struct{ tenant, id string }
	jobs := make(chan job)
	var mu sync.Mutex
	now, most, done := map[string]int{}, map[string]int{}, map[string]int{}

	var workers sync.WaitGroup
	for w := 0; w < 6; w++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range jobs {
				// Wait for a slot of the tenant, at most a minute.
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := perTenant.AcquireWait(wctx, j.tenant, j.id, 10*time.Minute)
				cancel()
				if err != nil {
					fmt.Println("gave up", j.id, err)
					continue
				}
				mu.Lock()
				now[j.tenant]++
				most[j.tenant] = max(most[j.tenant], now[j.tenant])
				mu.Unlock()

				time.Sleep(10 * time.Millisecond) // the job

				mu.Lock()
				now[j.tenant]--
				done[j.tenant]++
				mu.Unlock()
				if _, err := perTenant.Release(ctx, j.tenant, j.id); err != nil {
					fmt.Println("release", j.id, err)
				}
			}
		}()
	}
	for i := 1; i <= 5; i++ {
		jobs <- job{"acme", fmt.Sprintf("acme-export-%d", i)}
		if i <= 3 {
			jobs <- job{"globex", fmt.Sprintf("globex-build-%d", i)}
		}
	}
	close(jobs)
	workers.Wait()

	tenants := make([]string, 0, len(done))
	for t := range done {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		fmt.Printf("%s: %d jobs done, never more than 2 at once: %v\n", t, done[t], most[t] <= 2)
	}
	// Output:
	// acme: 5 jobs done, never more than 2 at once: true
	// globex: 3 jobs done, never more than 2 at once: true
}
