package resilience

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLibrary_plainGo: the library is plain Go (backend/file keeps its
// inotify reader's unsafe, the one syscall boundary, and is not read).
// They import no unsafe, call no runtime.Gosched, link to no runtime
// symbol and look up no key of the standard library's context package:
// code that leans on the runtime's or the standard library's internals
// breaks silently with a Go release.
func TestLibrary_plainGo(t *testing.T) {
	var files []string
	for _, dir := range []string{".", "httpx", "../cache", "../lock", "../breaker", "../fallback", "../telemetry", "../internal/*", "../backend/postgres"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	// The pipeline's mechanisms that are not stages live in internal
	// packages: the glob must read them.
	for _, pkg := range []string{"flight", "redisbatch", "slotreload", "aclcheck"} {
		if !slices.ContainsFunc(files, func(name string) bool { return filepath.Dir(name) == filepath.Join("..", "internal", pkg) }) {
			t.Errorf("internal/%s is not read", pkg)
		}
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "unsafe" {
				t.Errorf("%s imports unsafe", fset.Position(imp.Pos()))
			}
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if strings.HasPrefix(c.Text, "//go:linkname") {
					t.Errorf("%s: %s", fset.Position(c.Pos()), c.Text)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			switch {
			case !ok:
			case pkg.Name == "runtime" && sel.Sel.Name == "Gosched":
				t.Errorf("%s calls runtime.Gosched", fset.Position(sel.Pos()))
			case pkg.Name == "context" && sel.Sel.Name == "Cause" && isPackageLevel(f, sel):
				t.Errorf("%s calls context.Cause outside a function: a probe of the context package", fset.Position(sel.Pos()))
			}
			return true
		})
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && fd.Name.Name == "Value" && implementsContext(f, fd) {
				t.Errorf("%s: %s implements context.Context by hand; derive contexts with the context package", fset.Position(fd.Pos()), recvName(fd))
			}
		}
	}
	if checked < 60 {
		t.Fatalf("checked %d files; the glob found too few", checked)
	}
}

// isPackageLevel reports whether n lies in f outside every function body:
// in a package-level var's initializer.
func isPackageLevel(f *ast.File, n ast.Node) bool {
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil && fd.Body.Pos() <= n.Pos() && n.End() <= fd.Body.End() {
			return false
		}
	}
	// A function literal in a var initializer runs at init all the same.
	return true
}

// implementsContext reports whether the receiver type of fd, a Value
// method, also has the other methods of context.Context in f.
func implementsContext(f *ast.File, fd *ast.FuncDecl) bool {
	want := map[string]bool{"Deadline": true, "Done": true, "Err": true}
	for _, d := range f.Decls {
		if m, ok := d.(*ast.FuncDecl); ok && m.Recv != nil && recvName(m) == recvName(fd) {
			delete(want, m.Name.Name)
		}
	}
	return len(want) == 0
}

// recvName returns the name of the receiver type of method fd.
func recvName(fd *ast.FuncDecl) string {
	x := fd.Recv.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	switch e := x.(type) {
	case *ast.IndexExpr:
		x = e.X
	case *ast.IndexListExpr:
		x = e.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
