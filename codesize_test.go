package expset

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The sizes a reader can take in at once: a file of the package or of
// internal/store (tests included) holds at most maxFileLines lines, a
// function or method of the library (its non-test files) at most
// maxFuncLines, from its func line to its closing brace.
const (
	maxFileLines = 600
	maxFuncLines = 80
)

// longFuncsKnown are the library functions over maxFuncLines that are being
// rewritten; each is reported, not failed, until it fits. Remove an entry
// once its function fits (the test fails on an entry that does, so the list
// only shrinks). None now.
var longFuncsKnown = map[string]bool{}

// TestCodeSize fails on a file of the package over maxFileLines lines and on
// a library function over maxFuncLines lines that longFuncsKnown does not
// name.
func TestCodeSize(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	storeFiles, err := filepath.Glob("internal/store/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, storeFiles...)
	fset := token.NewFileSet()
	var known []string
	seen := map[string]bool{}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(src, []byte("\n")); n > maxFileLines {
			t.Errorf("%s: %d lines, over %d: split it by concern into files whose names say what they hold", name, n, maxFileLines)
		}
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			id := funcID(fd)
			lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			switch {
			case lines <= maxFuncLines && longFuncsKnown[id]:
				t.Errorf("%s: %s fits now (%d lines): remove it from longFuncsKnown", name, id, lines)
			case lines <= maxFuncLines:
			case longFuncsKnown[id]:
				known = append(known, fmt.Sprintf("%s: %s, %d lines", name, id, lines))
			default:
				t.Errorf("%s: %s has %d lines, over %d: split it", name, id, lines, maxFuncLines)
			}
			seen[id] = true
		}
	}
	for id := range longFuncsKnown {
		if !seen[id] {
			t.Errorf("longFuncsKnown names %s, which the package no longer has: remove it", id)
		}
	}
	if len(known) > 0 {
		slices.Sort(known)
		t.Logf("%d library functions over %d lines, known and being rewritten:\n\t%s", len(known), maxFuncLines, strings.Join(known, "\n\t"))
	}
}

// funcID names a function as Go does in a stack trace: name, or
// (*Type).name or Type.name for a method.
func funcID(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if idx, ok := typ.(*ast.IndexExpr); ok { // a generic receiver
		typ = idx.X
	}
	switch r := typ.(type) {
	case *ast.StarExpr:
		x := r.X
		if idx, ok := x.(*ast.IndexExpr); ok {
			x = idx.X
		}
		if id, ok := x.(*ast.Ident); ok {
			return "(*" + id.Name + ")." + fd.Name.Name
		}
	case *ast.Ident:
		return r.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
