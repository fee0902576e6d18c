package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTotals(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "out.1.1")
	if err := os.WriteFile(good, []byte("version: 1\nevents: Ir\nsummary: 99\nfn=main\n1 5\n\ntotals: 58317076\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := totals(good)
	if err != nil || n != 58317076 {
		t.Fatalf("totals = %d, %v; want 58317076", n, err)
	}
	partial := filepath.Join(dir, "out.1.2")
	if err := os.WriteFile(partial, []byte("version: 1\nsummary: 99\nfn=main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := totals(partial); err == nil {
		t.Fatal("a dump without its totals line (still being written) was accepted")
	}
}

func TestSkipsWithoutValgrind(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errOut bytes.Buffer
	if err := mainErr([]string{"-n", "100"}, &out, &errOut); err != nil {
		t.Fatalf("without valgrind: %v", err)
	}
	if !strings.Contains(out.String(), "skipped: valgrind") {
		t.Fatalf("output %q does not say it skipped", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, args := range [][]string{{"-n", "10"}, {"-runs", "0"}, {"-only", "("}} {
		if err := mainErr(args, &out, &errOut); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestWorkloadsResolve checks every workload has a unique name and that
// each one it is compared with exists, levers included, and that every
// Lua copy they name can be read.
func TestWorkloadsResolve(t *testing.T) {
	e := newEnv(nil, 100, 1, defaultTestdata())
	ws, err := workloads(e, true)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, w := range ws {
		if names[w.name] {
			t.Errorf("workload %s twice", w.name)
		}
		names[w.name] = true
	}
	for _, w := range ws {
		if w.vs != "" && !names[w.vs] {
			t.Errorf("%s is compared with %s, which is not measured", w.name, w.vs)
		}
		if w.state != "" && !names["recipe/straightforward/"+w.state] {
			t.Errorf("%s: no straightforward script in state %s", w.name, w.state)
		}
		if w.unit == "" || w.what == "" || w.prep == nil {
			t.Errorf("%s: unit, what and prep are required", w.name)
		}
	}
}

func TestWriteTable(t *testing.T) {
	ws := []workload{
		{name: "recipe/straightforward/live", unit: "call", what: "s", vs: "recipe/straightforward/live"},
		{name: "acquire/live", unit: "call", what: "a", vs: "recipe/straightforward/live", state: "live"},
	}
	var out bytes.Buffer
	writeTable(&out, ws, [][]float64{{60000, 60000}, {79000, 80000}})
	got := out.String()
	for _, want := range []string{"| acquire/live | a | call | 79.0k | 80.0k | 1.27% | 1.32x | recipe/straightforward/live | 1.32x |",
		"| recipe/straightforward/live | s | call | 60.0k | 60.0k | 0.00% | 1.00x |"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}
