package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkAcquire/uncontended/expset-2   100  1000 ns/op  20000 ops/s  10.0 server-us/op  5 allocs/op
BenchmarkAcquire/uncontended/expset-2   100  1000 ns/op  30000 ops/s  12.0 server-us/op  5 allocs/op
BenchmarkAcquire/uncontended/expset-2   100  1000 ns/op  25000 ops/s  11.0 server-us/op  5 allocs/op
BenchmarkAcquire/uncontended/raw-zadd-2 100  1000 ns/op  50000 ops/s   2.0 server-us/op  3 allocs/op
BenchmarkAcquire/smoke-miniredis/uncontended/expset-2 100 1000 ns/op 99999 ops/s
BenchmarkBatch/one-at-a-time-2  100  1000 ns/op  10000 ops/s
BenchmarkBatch/acquire-many-2   100  1000 ns/op  35000 ops/s
BenchmarkMemory/per-owner=3-2   100  1000 ns/op  60.0 B/member  40.0 B/member-bare  12.0 B/member-index
`

func TestTableAndChart(t *testing.T) {
	res, skipped, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 1 {
		t.Fatalf("skipped %d smoke lines, want 1", skipped)
	}
	if v, _ := res.median("Acquire/uncontended/expset", "ops/s"); v != 25000 {
		t.Fatalf("median ops/s %v, want 25000", v)
	}
	tab := table(res)
	for _, want := range []string{
		"| expset | 25000 | 1.00x |",
		"| raw-zadd | 50000 | 0.50x |",
		"| 11.0 | 1.00x |",
		"| 2.00 | 5.50x |",
		"| AcquireMany, 100 per call | 35000 | 3.50x |",
		"| 3 | 60.0 | 12.0 | 40.0 | 1.50x |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	svg := chart(res)
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, ">raw-zadd<") || strings.Contains(svg, "99999") {
		t.Errorf("chart:\n%s", svg)
	}
}
