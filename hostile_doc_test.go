package expset

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// docs/hostile-input.md, rendered from the hostile-input table
// (hostile_test.go) and checked against it.

// hostileDoc renders the table as docs/hostile-input.md.
func hostileDoc() string {
	var b strings.Builder
	b.WriteString(`# Hostile input: what every public call does with it

Generated from ` + "`hostile_test.go`" + `'s table (regenerate with
` + "`go test -run TestHostileInputDoc -update-hostile-doc`" + `; the test fails when they
differ). ` + "`TestHostileInput`" + ` runs every row on miniredis, redis-server and a
three-master cluster. A rejected call returns an error matching the sentinel
shown (` + "`errors.Is`" + `) and changes nothing: the test compares the sets'
keys before and after. An accepted call gives the result shown (times
are offsets from a fixed clock); inputs split by / share a row. Owners and members are any 1 to 1024
bytes. A nil ` + "`context.Context`" + ` is the caller's bug, as in the standard library.
A zero or nil ` + "`*Set`" + `, ` + "`*Quota`" + ` or ` + "`*Sweeper`" + ` fails every call reaching Redis with
` + "`ErrInvalidArgument`" + `; ` + "`Set.Name`" + `, ` + "`Shards`" + `, ` + "`ShardOf`" + ` and ` + "`OwnerKey`" + ` touch no Redis.
` + "`idcodec`" + ` touches no set; its own tests cover bad input
(` + "`TestNewCodecInvalidLayout`" + `, ` + "`TestCodecAfterCount`" + `, ` + "`FuzzCodecAfter`" + `).

| input | calls | outcome |
|---|---|---|
`)
	// One line per input and error, listing the calls in the table's
	// order; one line per accepted input, with each call's result.
	type line struct{ input, outcome string }
	var lines []line
	calls := map[line][]string{}   // by line: the calls, or "calls: result"
	results := map[line][]string{} // by line of accepted input: the results in order
	for _, c := range hostileCases() {
		l := line{c.input, "ok"}
		if c.want != nil {
			l.outcome = "`" + sentinelName(c.want) + "`"
		}
		if _, ok := calls[l]; !ok {
			lines = append(lines, l)
		}
		call := "`" + c.call + "`"
		if c.want != nil {
			calls[l] = append(calls[l], call)
			continue
		}
		i := slices.Index(results[l], c.got)
		if i < 0 {
			results[l] = append(results[l], c.got)
			calls[l] = append(calls[l], call)
			continue
		}
		calls[l][i] += ", " + call
	}
	// Inputs whose calls and outcomes read the same share one row, at the
	// first one's place.
	type row struct {
		inputs         []string
		cells, outcome string
	}
	var rows []*row
	byCells := map[[2]string]*row{}
	for _, l := range lines {
		cells := strings.Join(calls[l], ", ")
		if l.outcome == "ok" {
			parts := make([]string, len(calls[l]))
			for i, c := range calls[l] {
				parts[i] = c + ": " + mdCell(results[l][i])
			}
			cells = strings.Join(parts, "; ")
		}
		k := [2]string{cells, l.outcome}
		if r := byCells[k]; r != nil {
			r.inputs = append(r.inputs, l.input)
			continue
		}
		byCells[k] = &row{inputs: []string{l.input}, cells: cells, outcome: l.outcome}
		rows = append(rows, byCells[k])
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", mdCell(joinInputs(r.inputs)), r.cells, r.outcome)
	}
	return b.String()
}

// joinInputs writes the inputs of one row: "owner `a` / `b`, n 1" when
// they differ only between a first word and a suffix after a comma that
// they share, else in full, joined by " / ".
func joinInputs(in []string) string {
	if len(in) == 1 {
		return in[0]
	}
	split := func(s string) (head, mid, tail string, ok bool) {
		head, rest, ok := strings.Cut(s, " ")
		if !ok || strings.ContainsAny(head, "`(\"") {
			return "", "", "", false
		}
		mid, tail, _ = strings.Cut(rest, ", ")
		return head, mid, tail, mid != ""
	}
	head, _, tail, ok := split(in[0])
	mids := make([]string, len(in))
	for i, s := range in {
		h, m, tl, ok1 := split(s)
		if !ok || !ok1 || h != head || tl != tail {
			return strings.Join(in, " / ")
		}
		mids[i] = m
	}
	out := head + " " + strings.Join(mids, " / ")
	if tail != "" {
		out += ", " + tail
	}
	return out
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// sentinelName returns the exported name of a sentinel error.
func sentinelName(err error) string {
	for name, e := range map[string]error{
		"ErrNotFound": ErrNotFound, "ErrInvalidArgument": ErrInvalidArgument,
		"ErrConfigMismatch": ErrConfigMismatch, "errUnexpectedReply": errUnexpectedReply,
	} {
		if e == err {
			return name
		}
	}
	return err.Error()
}

// TestHostileInputDoc checks that docs/hostile-input.md is the table in
// this file, rendered (run with -update-hostile-doc to rewrite it).
func TestHostileInputDoc(t *testing.T) {
	t.Parallel()
	want := hostileDoc()
	if *updateHostileDoc {
		if err := os.WriteFile(hostileDocPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(hostileDocPath)
	if err != nil {
		t.Fatalf("%v (create it with go test -run TestHostileInputDoc -update-hostile-doc)", err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from the table in hostile_test.go; regenerate it with go test -run TestHostileInputDoc -update-hostile-doc", hostileDocPath)
	}
}
