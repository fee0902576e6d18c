package expset

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/expset/expset/internal/redistest"
)

// BenchmarkScheduleTickLatency runs an @every 1s schedule through a
// Sweeper.Run and a Consume on the real server, b.N ticks (so b.N
// seconds), and reports how long after its tick each handler call began:
// the median and the largest, in ms.
//
// go test -run '^$' -bench BenchmarkScheduleTickLatency -benchtime 20x
func BenchmarkScheduleTickLatency(b *testing.B) {
	rdb := redistest.Client(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Open(ctx, rdb, uniqueName(b, rdb), WithExpiryEvents(), WithConsumerGroups("g"))
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewSweeper(s)
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu   sync.Mutex
		late []time.Duration
		wg   sync.WaitGroup
	)
	wg.Add(2)
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	go func() {
		defer wg.Done()
		_ = s.Consume(ctx, "g", "c", func(_ context.Context, e Expiry) error {
			mu.Lock()
			late = append(late, time.Since(e.Deadline))
			if len(late) == b.N {
				cancel()
			}
			mu.Unlock()
			return nil
		})
	}()
	b.ResetTimer()
	if _, err := s.PutSchedule(ctx, "beat", "@every 1s"); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	b.StopTimer()
	_, _ = s.RemoveSchedule(context.Background(), "beat")
	slices.Sort(late)
	if len(late) == 0 {
		b.Fatal("no tick")
	}
	b.ReportMetric(float64(late[len(late)/2].Microseconds())/1000, "ms-late-p50")
	b.ReportMetric(float64(late[len(late)-1].Microseconds())/1000, "ms-late-max")
}
