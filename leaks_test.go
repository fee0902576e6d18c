package expset

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// leakLabel is the profiler label noLeaks puts on a test's goroutine. Every
// goroutine inherits the labels of the one that started it, so each goroutine
// a test starts, directly or through the library, carries its test's value.
const leakLabel = "expset-test"

// leakTests numbers the tests noLeaks watches, so each label value is unique.
var leakTests atomic.Int64

// leakWait is how long noLeaks lets a test's goroutines take to end after it.
const leakWait = 5 * time.Second

// noLeaks fails t if goroutines started during it outlive it, apart from the
// shared redis-server's waiter, which redistest may start on first use. It
// tells t's goroutines from those of other tests by a profiler label, so a
// test that calls it may run in parallel with others; call it before t
// starts any goroutine.
func noLeaks(t *testing.T) {
	t.Helper()
	value := t.Name() + "#" + strconv.FormatInt(leakTests.Add(1), 10)
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels(leakLabel, value)))
	t.Cleanup(func() {
		// The cleanup runs on t's own goroutine: it is no leak.
		pprof.SetGoroutineLabels(context.Background())
		var left []string
		for end := time.Now().Add(leakWait); ; time.Sleep(10 * time.Millisecond) {
			left = labeledGoroutines(value, "github.com/expset/expset/internal/redistest.(*Server).launch.func1")
			if len(left) == 0 || time.Now().After(end) {
				break
			}
		}
		if len(left) > 0 {
			t.Errorf("%d goroutine stacks started by the test still run %v after it:\n%s", len(left), leakWait, strings.Join(left, "\n\n"))
		}
	})
}

// labeledGoroutines returns the stacks (as the goroutine profile prints them,
// with how many goroutines share each) of the goroutines labeled value,
// leaving out those with a frame in ignore.
func labeledGoroutines(value, ignore string) []string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return []string{fmt.Sprintf("goroutine profile: %v", err)}
	}
	want := strconv.Quote(leakLabel) + ":" + strconv.Quote(value)
	var out []string
	// Records are separated by blank lines: "N @ pcs", "# labels: {...}"
	// when the goroutines have labels, then one "#\tpc\tfunc+off\tfile:line"
	// line per frame.
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		labels, _, _ := strings.Cut(rec[strings.Index(rec, "\n")+1:], "\n")
		if !strings.HasPrefix(labels, "# labels: ") || !containsLabel(labels, want) || strings.Contains(rec, ignore+"+") {
			continue
		}
		out = append(out, rec)
	}
	return out
}

// containsLabel reports whether a "# labels: {...}" line holds the pair want
// ("key":"value", quoted), whole.
func containsLabel(line, want string) bool {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "# labels: {"), "}")
	for _, pair := range strings.Split(line, ", ") {
		if pair == want {
			return true
		}
	}
	return false
}
