package expset

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strings"
	"testing"
)

// maxExportedNames is the most exported names the root package may have:
// what "go doc" lists, counted one per type, function, method of an exported
// type, constant and variable (struct fields not counted). A newcomer should
// take the API in at a glance; raise it only with a reason in docs/design.md.
const maxExportedNames = 124

// exportedNames lists the root package's exported names as go doc shows them.
func exportedNames(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := pkgs["expset"]
	if !ok {
		t.Fatal("package expset not found")
	}
	files := make([]*ast.File, 0, len(p.Files))
	for _, f := range p.Files {
		files = append(files, f)
	}
	d, err := doc.NewFromFiles(fset, files, "github.com/expset/expset")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	values := func(prefix string, vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				if token.IsExported(n) {
					names = append(names, prefix+n)
				}
			}
		}
	}
	values("const ", d.Consts)
	values("var ", d.Vars)
	for _, f := range d.Funcs {
		names = append(names, "func "+f.Name)
	}
	for _, ty := range d.Types {
		names = append(names, "type "+ty.Name)
		values("const ", ty.Consts)
		values("var ", ty.Vars)
		for _, f := range ty.Funcs {
			names = append(names, "func "+f.Name)
		}
		for _, m := range ty.Methods {
			names = append(names, "method "+ty.Name+"."+m.Name)
		}
	}
	sort.Strings(names)
	return names
}

// TestExportedNames keeps the root package's API small: it prints the
// exported names with their count and fails above maxExportedNames.
func TestExportedNames(t *testing.T) {
	t.Parallel()
	names := exportedNames(t)
	t.Logf("%d exported names:\n%s", len(names), strings.Join(names, "\n"))
	if len(names) > maxExportedNames {
		t.Fatalf("the root package exports %d names, more than %d: fold, unexport or group before adding", len(names), maxExportedNames)
	}
}
