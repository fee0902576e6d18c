package expset

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestMarkdownGoSnippetsCompile builds every ```go block of every Markdown
// file in the repository (README.md, docs/, bench/, each module's README,
// CONTRIBUTING.md, CHANGELOG.md), each as a package of its own inside the
// module that holds the file, with the workspace's modules, so a snippet
// that names a removed identifier or calls a function wrongly fails here,
// with the Markdown file and line in the compiler's message.
//
// A block that starts with a package clause is a whole file, built as it
// is. Any other block is a fragment, written the way the docs show it:
//
//   - declarations (func, type, var, const) stand at the package level;
//   - statements go into the body of func _() error, so a fragment may
//     return an error; the variables a fragment declares at its top level
//     count as used (the reader's code goes on using them);
//   - what the fragment uses and does not declare (ctx, rdb, a caller's
//     own function) is declared in an HTML comment just before the block,
//     which Markdown does not show: <!-- go: var ctx context.Context;
//     var rdb redis.UniversalClient --> (package-level Go, any number of
//     lines up to -->);
//   - imports are added for the packages the fragment and its comment name
//     (the standard library's usual ones, go-redis, expset and its
//     modules, Prometheus and OpenTelemetry: snippetImports).
func TestMarkdownGoSnippetsCompile(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds every Markdown snippet with the go command; skipped with -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	files := markdownFiles(t)
	byModule := map[string][]mdSnippet{}
	total := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range mdGoBlocks(f, string(src)) {
			mod := moduleDirOf(t, f)
			byModule[mod] = append(byModule[mod], s)
			total++
		}
	}
	if total == 0 {
		t.Fatal("no ```go block found in any Markdown file: the check would pass vacuously")
	}
	mods := make([]string, 0, len(byModule))
	for m := range byModule {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	var pkgs []string
	for _, mod := range mods {
		tmp, err := os.MkdirTemp(mod, "_mdsnippets")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(tmp) })
		for i, s := range byModule[mod] {
			code, err := snippetFile(s, fmt.Sprintf("snippet%d", i))
			if err != nil {
				t.Errorf("%s:%d: %v", s.file, s.line, err)
				continue
			}
			dir := filepath.Join(tmp, fmt.Sprintf("s%d", i))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "snippet.go"), code, 0o644); err != nil {
				t.Fatal(err)
			}
			pkgs = append(pkgs, "./"+filepath.ToSlash(dir))
		}
	}
	// One go build, from the workspace's root, for every module's snippets;
	// with several packages it compiles them and discards the result.
	out, err := exec.Command(gobin, append([]string{"build"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Errorf("Go snippets in Markdown files do not build (file:line is the Markdown's):\n%s", out)
	}
	t.Logf("%d Go snippets in %d Markdown files built", total, len(files))
}

// TestMarkdownSnippetCheckFails shows that the snippet check fails on a
// broken snippet: a fragment calling a function that does not exist, and
// one using NewSweeper's result as one value (it returns two).
func TestMarkdownSnippetCheckFails(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command; skipped with -short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	md := "# broken\n\n<!-- go: var set *expset.Set; var ctx context.Context -->\n```go\n" +
		"if err := expset.NewSweeper(set).Run(ctx); err != nil {\n\treturn err\n}\n```\n\n" +
		"```go\nexpset.NoSuchCall()\n```\n"
	blocks := mdGoBlocks("broken.md", md)
	if len(blocks) != 2 {
		t.Fatalf("found %d blocks, want 2", len(blocks))
	}
	tmp, err := os.MkdirTemp(".", "_mdsnippets")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for i, b := range blocks {
		code, err := snippetFile(b, "broken")
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(tmp, fmt.Sprintf("s%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "snippet.go"), code, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(gobin, "build", "-o", os.DevNull, "./"+filepath.ToSlash(dir)).CombinedOutput()
		if err == nil {
			t.Errorf("broken snippet %d built:\n%s", i+1, code)
			continue
		}
		wantLine := fmt.Sprintf("broken.md:%d", b.line)
		if !bytes.Contains(out, []byte(wantLine)) {
			t.Errorf("snippet %d's error does not name %s:\n%s", i+1, wantLine, out)
		}
	}
}

// TestDocsWordCount keeps README.md and docs/*.md, the docs a user reads,
// at most maxDocWords words in all (counted as wc -w counts them; .ci/run
// prints the same count).
func TestDocsWordCount(t *testing.T) {
	const maxDocWords = 15000
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md"}, files...)
	words := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := len(strings.Fields(string(b)))
		t.Logf("%6d %s", n, f)
		words += n
	}
	t.Logf("README.md + docs/: %d words", words)
	if words > maxDocWords {
		t.Errorf("README.md + docs/ hold %d words, more than %d: shorten them (measurements go to bench/README.md)", words, maxDocWords)
	}
}

// mdSnippet is one ```go block: its text, the Markdown file and the line
// of its first code line, and the declarations of the HTML comment before
// it (with that comment's first line).
type mdSnippet struct {
	file      string
	line      int
	code      string
	decls     string
	declsLine int
}

// markdownFiles lists the repository's Markdown files, leaving out
// directories whose names start with "." or "_" and testdata, as the go
// command does.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// moduleDirOf returns the directory of the go.mod nearest above file.
func moduleDirOf(t *testing.T, file string) string {
	t.Helper()
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if dir == "." {
			t.Fatalf("no go.mod above %s", file)
		}
		dir = filepath.Dir(dir)
	}
}

var goDeclComment = regexp.MustCompile(`(?s)<!--\s*go:(.*?)-->\s*$`)

// mdGoBlocks returns the ```go blocks of md, each with the declarations of
// a <!-- go: ... --> comment standing just before it (blank lines between
// allowed).
func mdGoBlocks(file, md string) []mdSnippet {
	lines := strings.Split(md, "\n")
	var out []mdSnippet
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		s := mdSnippet{file: file, line: i + 2}
		// The comment before the fence, if any.
		j := i - 1
		for j >= 0 && strings.TrimSpace(lines[j]) == "" {
			j--
		}
		if j >= 0 && strings.HasSuffix(strings.TrimSpace(lines[j]), "-->") {
			k := j
			for k >= 0 && !strings.Contains(lines[k], "<!--") {
				k--
			}
			if k >= 0 {
				if m := goDeclComment.FindStringSubmatch(strings.Join(lines[k:j+1], "\n")); m != nil {
					s.decls = m[1]
					s.declsLine = k + 1
				}
			}
		}
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, lines[i])
		}
		s.code = strings.Join(code, "\n")
		out = append(out, s)
	}
	return out
}

// snippetImports maps the package names a snippet may use to their import
// paths.
var snippetImports = map[string]string{
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"log":        "log",
	"os":         "os",
	"signal":     "os/signal",
	"slog":       "log/slog",
	"strconv":    "strconv",
	"strings":    "strings",
	"sync":       "sync",
	"syscall":    "syscall",
	"time":       "time",
	"expset":     "github.com/expset/expset",
	"expsetotel": "github.com/expset/expset/expsetotel",
	"expsetprom": "github.com/expset/expset/expsetprom",
	"idcodec":    "github.com/expset/expset/idcodec",
	"redis":      "github.com/redis/go-redis/v9",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":       "go.opentelemetry.io/otel",
}

// snippetFile returns the Go file that builds s as package pkg, with
// //line comments pointing back at the Markdown.
func snippetFile(s mdSnippet, pkg string) ([]byte, error) {
	if strings.HasPrefix(strings.TrimSpace(s.code), "package ") {
		return []byte(fmt.Sprintf("//line %s:%d\n%s\n", s.file, s.line, s.code)), nil
	}
	var body bytes.Buffer
	if s.decls != "" {
		fmt.Fprintf(&body, "//line %s:%d\n%s\n", s.file, s.declsLine, s.decls)
	}
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+s.code, 0); err == nil {
		// Declarations: at the package level.
		fmt.Fprintf(&body, "\n//line %s:%d\n%s\n", s.file, s.line, s.code)
	} else {
		names, err := topLevelNames(s.code)
		if err != nil {
			return nil, fmt.Errorf("neither Go declarations nor statements: %v", err)
		}
		fmt.Fprintf(&body, "\nfunc _() error {\n//line %s:%d\n%s\n", s.file, s.line, s.code)
		for _, n := range names {
			fmt.Fprintf(&body, "\t_ = %s\n", n)
		}
		body.WriteString("\treturn nil\n}\n")
	}
	// The imports: the known package names left undeclared.
	f, err := parser.ParseFile(fset, "", "package p\n"+body.String(), 0)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var imports []string
	for _, id := range f.Unresolved {
		if path, ok := snippetImports[id.Name]; ok && !seen[id.Name] {
			seen[id.Name] = true
			imports = append(imports, fmt.Sprintf("%s %q", id.Name, path))
		}
	}
	sort.Strings(imports)
	var out bytes.Buffer
	fmt.Fprintf(&out, "package %s\n\nimport (\n", pkg)
	for _, im := range imports {
		fmt.Fprintf(&out, "\t%s\n", im)
	}
	out.WriteString(")\n\n")
	out.Write(body.Bytes())
	return out.Bytes(), nil
}

// topLevelNames parses code as a function body and returns the names its
// top-level statements declare (:= and var), the blank identifier left
// out.
func topLevelNames(code string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+code+"\n}\n", 0)
	if err != nil {
		return nil, err
	}
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" {
			names = append(names, id.Name)
		}
	}
	for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, l := range st.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, sp := range g.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return names, nil
}
