package main

import (
	"fmt"
	"io"
	"math"
)

// writeTable prints one markdown row per workload: its count in every run,
// the largest difference between runs, and its ratio to the workload it is
// compared with (the mean of the runs of each).
func writeTable(w io.Writer, ws []workload, res [][]float64) {
	mean := map[string]float64{}
	for i, wl := range ws {
		mean[wl.name] = avg(res[i])
	}
	runs := len(res[0])
	head := "| workload | what | per |"
	sep := "|---|---|---|"
	for r := 1; r <= runs; r++ {
		head += fmt.Sprintf(" run %d |", r)
		sep += "---:|"
	}
	head += " runs differ | ratio | ÷ | ÷ straightforward |"
	sep += "---:|---:|---|---:|"
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for i, wl := range ws {
		row := fmt.Sprintf("| %s | %s | %s |", wl.name, wl.what, wl.unit)
		for _, v := range res[i] {
			row += " " + kilo(v) + " |"
		}
		row += fmt.Sprintf(" %.2f%% |", spread(res[i])*100)
		if base, ok := mean[wl.vs]; ok && base > 0 {
			row += fmt.Sprintf(" %.2fx | %s |", mean[wl.name]/base, wl.vs)
		} else {
			row += " | |"
		}
		if base, ok := mean["recipe/straightforward/"+wl.state]; ok && wl.state != "" && base > 0 {
			row += fmt.Sprintf(" %.2fx |", mean[wl.name]/base)
		} else {
			row += " |"
		}
		fmt.Fprintln(w, row)
	}
}

// kilo formats an instruction count in thousands: 66213 -> "66.2k".
func kilo(v float64) string {
	return fmt.Sprintf("%.1fk", v/1000)
}

func avg(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// spread is (max-min)/min over the runs: 0 for one run.
func spread(xs []float64) float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	if lo <= 0 {
		return 0
	}
	return (hi - lo) / lo
}
