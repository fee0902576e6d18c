package expset

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeSnippetsCompile checks that every Go snippet in README.md stands,
// line for line, in one of the package's example files, so the README's code
// is code the tests compile (and, where the example has an Output, run).
// Leading white space and blank lines are ignored.
func TestReadmeSnippetsCompile(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
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
	snippets := goSnippets(string(md))
	if len(snippets) == 0 {
		t.Fatal("README.md has no Go snippet: the check would pass vacuously")
	}
	for i, s := range snippets {
		lines := codeLines(s)
		found := false
		for _, ex := range examples {
			if containsRun(ex, lines) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("README.md Go snippet %d is not in any example*_test.go file (copy it from one, or add it to one):\n%s", i+1, s)
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
