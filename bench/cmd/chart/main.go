// Command chart turns `go test -bench . ./bench/` output into the results
// table of bench/README.md and the chart bench/chart.svg.
//
//	go test -run '^$' -bench . ./bench/ | tee bench.txt
//	go run ./bench/cmd/chart -svg bench/chart.svg bench.txt   # prints the table
//
// The input may hold several runs (concatenated outputs, or -count); each
// metric is the median over the runs. Lines of a miniredis smoke run
// ("smoke-miniredis" in the name) are left out: their timings are not
// Redis's.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	svgPath := flag.String("svg", "", "write the chart to this file")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: chart [-svg file.svg] [bench-output.txt]  (stdin when no file)")
		flag.PrintDefaults()
	}
	flag.Parse()
	var in io.Reader = os.Stdin
	if flag.NArg() > 0 {
		f, err := os.Open(flag.Arg(0))
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		in = f
	}
	res, skipped, err := parse(in)
	if err != nil {
		fatal(err)
	}
	if skipped > 0 {
		fmt.Fprintf(os.Stderr, "chart: left out %d miniredis smoke-run lines\n", skipped)
	}
	if len(res.order) == 0 {
		fatal(fmt.Errorf("no benchmark results of a real Redis in the input"))
	}
	fmt.Print(table(res))
	if *svgPath != "" {
		if err := os.WriteFile(*svgPath, []byte(chart(res)), 0o644); err != nil {
			fatal(err)
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "chart:", err)
	os.Exit(1)
}

// results holds every metric of every benchmark, all runs, in input order.
type results struct {
	order  []string
	values map[string]map[string][]float64 // name -> unit -> one value per run
}

// median returns the median of name's unit over the runs, and whether any
// run reported it.
func (r results) median(name, unit string) (float64, bool) {
	vs := r.values[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

func (r results) runs(name string) int { return len(r.values[name]["ns/op"]) }

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads benchmark lines: name, iterations, then value-unit pairs.
func parse(in io.Reader) (results, int, error) {
	res := results{values: map[string]map[string][]float64{}}
	skipped := 0
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		if strings.Contains(f[0], "smoke-miniredis") {
			skipped++
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		m, ok := res.values[name]
		if !ok {
			m = map[string][]float64{}
			res.values[name] = m
			res.order = append(res.order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return res, skipped, fmt.Errorf("%s: value %q: %w", f[0], f[i], err)
			}
			m[f[i+1]] = append(m[f[i+1]], v)
		}
	}
	return res, skipped, sc.Err()
}

// group returns the benchmarks under prefix ("Acquire/contended/"), by the
// rest of their names, in input order.
func (r results) group(prefix string) []string {
	var out []string
	for _, n := range r.order {
		if rest, ok := strings.CutPrefix(n, prefix); ok && !strings.Contains(rest, "/") {
			out = append(out, rest)
		}
	}
	return out
}

// workloads lists the Acquire workloads present, in input order.
func (r results) workloads() []string {
	var out []string
	for _, n := range r.order {
		parts := strings.Split(n, "/")
		if len(parts) == 3 && parts[0] == "Acquire" && !slices.Contains(out, parts[1]) {
			out = append(out, parts[1])
		}
	}
	return out
}

func num(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func ratio(a, b float64, okA, okB bool) string {
	if !okA || !okB || b == 0 {
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "x"
}

// table renders the README's tables: per Acquire workload, every recipe
// with expset's ratios; then the batch, server time and memory results.
func table(r results) string {
	var b strings.Builder
	for _, w := range r.workloads() {
		prefix := "Acquire/" + w + "/"
		libOps, okLO := r.median(prefix+"expset", "ops/s")
		libSrv, okLS := r.median(prefix+"expset", "server-us/op")
		fmt.Fprintf(&b, "\n**%s** (median of %d runs)\n\n", w, r.runs(prefix+"expset"))
		b.WriteString("| recipe | ops/s | expset ÷ it | p50 µs | p99 µs | server µs/op | expset ÷ it | admit % | over-admits | allocs/op |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, rc := range r.group(prefix) {
			n := prefix + rc
			ops, okO := r.median(n, "ops/s")
			srv, okS := r.median(n, "server-us/op")
			p50, ok50 := r.median(n, "p50-us")
			p99, ok99 := r.median(n, "p99-us")
			adm, okA := r.median(n, "admit-%")
			over, okOv := r.median(n, "over-admits")
			allocs, okAl := r.median(n, "allocs/op")
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rc,
				num(ops, okO), ratio(libOps, ops, okLO, okO), num(p50, ok50), num(p99, ok99),
				num(srv, okS), ratio(libSrv, srv, okLS, okS), num(adm, okA), num(over, okOv), num(allocs, okAl))
		}
	}
	if one, ok1 := r.median("Batch/one-at-a-time", "ops/s"); ok1 {
		many, ok2 := r.median("Batch/acquire-many", "ops/s")
		s1, okS1 := r.median("Batch/one-at-a-time", "server-us/op")
		s2, okS2 := r.median("Batch/acquire-many", "server-us/op")
		b.WriteString("\n**batch** (uncontended admissions, 64 goroutines)\n\n| way | ops/s | ÷ one at a time | server µs/op |\n|---|---:|---:|---:|\n")
		fmt.Fprintf(&b, "| one Acquire at a time | %s | 1.00x | %s |\n", num(one, ok1), num(s1, okS1))
		fmt.Fprintf(&b, "| AcquireMany, 100 per call | %s | %s | %s |\n", num(many, ok2), ratio(many, one, ok2, ok1), num(s2, okS2))
	}
	if paths := r.group("ServerTime/"); len(paths) > 0 {
		b.WriteString("\n**server time per call** (one connection, interleaved blocks; µs)\n\n")
		b.WriteString("| path | expset | expset before (dd7b64a) | lua check-then-add | TIME+ZADD script | raw ZADD | expset ÷ lua | expset ÷ ZADD | before ÷ lua |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, p := range paths {
			n := "ServerTime/" + p
			get := func(u string) string { v, ok := r.median(n, u); return num(v, ok) }
			getx := func(u string) string {
				v, ok := r.median(n, u)
				if !ok {
					return "–"
				}
				return strconv.FormatFloat(v, 'f', 2, 64) + "x"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p, get("expset-us"), get("expset-dd7b64a-us"),
				get("lua-us"), get("time-zadd-us"), get("zadd-us"), getx("expset/lua"), getx("expset/zadd"), getx("dd7b64a/lua"))
		}
	}
	if sizes := r.group("Memory/"); len(sizes) > 0 {
		b.WriteString("\n**memory** (bytes per pending member, MEMORY USAGE SAMPLES 0)\n\n| members per owner | expset, due index included | of which due index | bare sorted set | expset ÷ bare |\n|---|---:|---:|---:|---:|\n")
		for _, s := range sizes {
			n := "Memory/" + s
			all, okA := r.median(n, "B/member")
			idx, okI := r.median(n, "B/member-index")
			bare, okB := r.median(n, "B/member-bare")
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", strings.TrimPrefix(s, "per-owner="), num(all, okA), num(idx, okI), num(bare, okB), ratio(all, bare, okA, okB))
		}
	}
	return b.String()
}

// chart draws two panels of horizontal bars, one row per Acquire workload
// and recipe (and the batch): throughput on the left, server time per
// admission on the right. expset's bars are dark.
func chart(r results) string {
	type row struct {
		label    string
		ops, srv float64
		okO, okS bool
		lib      bool
		gap      bool // a workload heading before this row
		heading  string
	}
	var rows []row
	for _, w := range r.workloads() {
		first := true
		for _, rc := range r.group("Acquire/" + w + "/") {
			n := "Acquire/" + w + "/" + rc
			ops, okO := r.median(n, "ops/s")
			srv, okS := r.median(n, "server-us/op")
			rw := row{label: rc, ops: ops, srv: srv, okO: okO, okS: okS, lib: rc == "expset"}
			if first {
				rw.gap, rw.heading, first = true, w, false
			}
			rows = append(rows, rw)
		}
	}
	first := true
	for _, bn := range r.group("Batch/") {
		ops, okO := r.median("Batch/"+bn, "ops/s")
		srv, okS := r.median("Batch/"+bn, "server-us/op")
		rw := row{label: bn, ops: ops, srv: srv, okO: okO, okS: okS, lib: true}
		if first {
			rw.gap, rw.heading, first = true, "batch (expset)", false
		}
		rows = append(rows, rw)
	}
	var maxOps, maxSrv float64
	for _, rw := range rows {
		maxOps = max(maxOps, rw.ops)
		maxSrv = max(maxSrv, rw.srv)
	}
	const (
		labelW = 150
		panelW = 300
		gapW   = 70
		rowH   = 18
		headH  = 22
		top    = 50
	)
	height := top + 20
	for _, rw := range rows {
		if rw.gap {
			height += headH
		}
		height += rowH
	}
	width := labelW + panelW + gapW + panelW + 60
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	x1 := labelW
	x2 := labelW + panelW + gapW
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="13" font-weight="bold">throughput, ops/s (64 goroutines; higher is better)</text>`+"\n", x1)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="13" font-weight="bold">server µs per admission (lower is better)</text>`+"\n", x2)
	fmt.Fprintf(&b, `<text x="%d" y="36" fill="#555">median of the runs in the input; expset dark, alternatives light</text>`+"\n", x1)
	y := top
	for _, rw := range rows {
		if rw.gap {
			y += headH
			fmt.Fprintf(&b, `<text x="4" y="%d" font-weight="bold">%s</text>`+"\n", y-6, esc(rw.heading))
		}
		fill := "#9ecae1"
		if rw.lib {
			fill = "#08519c"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-6, y+12, esc(rw.label))
		bar := func(x int, v, maxV float64, ok bool, unit string) {
			if !ok || maxV == 0 {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">n/a</text>`+"\n", x+2, y+12)
				return
			}
			w := int(v / maxV * panelW)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x, y+2, max(w, 1), rowH-4, fill)
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s%s</text>`+"\n", x+max(w, 1)+4, y+12, num(v, true), unit)
		}
		bar(x1, rw.ops, maxOps, rw.okO, "")
		bar(x2, rw.srv, maxSrv, rw.okS, " µs")
		y += rowH
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
