package expset

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// exampleDocs are the Markdown files whose every Go snippet is code of an
// example: the README and the pages a newcomer copies from.
var exampleDocs = []string{"README.md", "docs/jobs.md"}

// TestReadmeSnippetsCompile checks that every Go snippet in exampleDocs
// stands, line for line, in one of the package's example files, so their
// code is code the tests compile (and, where the example has an Output,
// run). Leading white space and blank lines are ignored.
func TestReadmeSnippetsCompile(t *testing.T) {
	files, err := filepath.Glob("example*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var examples [][]string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		examples = append(examples, codeLines(string(src)))
	}
	for _, doc := range exampleDocs {
		md, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		snippets := goSnippets(string(md))
		if len(snippets) == 0 {
			t.Fatalf("%s has no Go snippet: the check would pass vacuously", doc)
		}
		for i, s := range snippets {
			lines := codeLines(s)
			if !slices.ContainsFunc(examples, func(ex []string) bool { return containsRun(ex, lines) }) {
				t.Errorf("%s Go snippet %d is not in any example*_test.go file (copy it from one, or add it to one):\n%s", doc, i+1, s)
			}
		}
	}
}

// goSnippets returns the bodies of the ```go blocks of a Markdown text.
func goSnippets(md string) []string {
	var out []string
	var cur []string
	in := false
	for _, l := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(l) == "```":
			in = false
			out = append(out, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, l)
		}
	}
	return out
}

// codeLines splits src into its lines with leading and trailing white space
// removed, leaving out blank lines.
func codeLines(src string) []string {
	var out []string
	for _, l := range strings.Split(src, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// containsRun reports whether want stands in have as a contiguous run.
func containsRun(have, want []string) bool {
	for i := 0; i+len(want) <= len(have); i++ {
		match := true
		for j := range want {
			if have[i+j] != want[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
