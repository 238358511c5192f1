package resilience

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// callers returns, for each call in the non-test files of the package
// and of the internal packages it runs on (internal/coord, the seam,
// internal/loadcall, the loader call, internal/bg, the launch of
// background work, and internal/wait, the wait loop) whose callee's
// expression is name or ends in "."+name (p.bg.Add for "bg.Add"), the
// function whose body holds it, once each, sorted.
func callers(t *testing.T, name string) []string {
	t.Helper()
	return holders(t, []string{"*.go", "../internal/coord/*.go", "../internal/loadcall/*.go", "../internal/bg/*.go", "../internal/wait/*.go"}, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return false
		}
		called := types.ExprString(call.Fun)
		return called == name || strings.HasSuffix(called, "."+name)
	})
}

// holders returns the functions of the non-test files that patterns
// match whose bodies hold a node for which is reports true, once each,
// sorted.
func holders(t *testing.T, patterns []string, is func(ast.Node) bool) []string {
	t.Helper()
	var files []string
	for _, pattern := range patterns {
		fs, err := filepath.Glob(pattern)
		if err != nil || len(fs) == 0 {
			t.Fatalf("%s: %v, %d files", pattern, err, len(fs))
		}
		files = append(files, fs...)
	}
	fset := token.NewFileSet()
	var in []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if n != nil && is(n) && !slices.Contains(in, fd.Name.Name) {
					in = append(in, fd.Name.Name)
				}
				return true
			})
		}
	}
	slices.Sort(in)
	return in
}

// TestCore_oneLaunch: background work (shared loads, refreshes, releases)
// starts in one place, internal/bg's Launch, the only go statement of the
// stages and of internal/bg; beside it, only the two callers that run a
// load on their own goroutine and context count it for Close.
func TestCore_oneLaunch(t *testing.T) {
	if got := callers(t, "bg.Add"); !slices.Equal(got, []string{"fetchAlone", "missMany"}) {
		t.Errorf("bg.Tasks.Add is called from %v; want fetchAlone and missMany alone", got)
	}
	if got := callers(t, "bg.Launch"); len(got) != 5 {
		t.Errorf("bg.Tasks.Launch is called from %v; want the five launches of background work", got)
	}
	goes := holders(t, []string{"*.go", "../internal/bg/*.go"}, func(n ast.Node) bool {
		_, ok := n.(*ast.GoStmt)
		return ok
	})
	if !slices.Equal(goes, []string{"Launch"}) {
		t.Errorf("go statements are in %v; want Launch alone", goes)
	}
}

// TestCore_oneWatchdog: a lease beats in one loop, beat (internal/coord),
// on the seam's ExtendMany, whether it is one lease (coord.Hold) or a
// batch's (holdMany).
func TestCore_oneWatchdog(t *testing.T) {
	if got := callers(t, "co.ExtendMany"); !slices.Equal(got, []string{"beat"}) {
		t.Errorf("ExtendMany is called from %v; want beat alone", got)
	}
	if got := callers(t, "KeepAlive"); len(got) > 0 {
		t.Errorf("lock's own watchdog is started from %v; want none", got)
	}
}

// TestCore_oneWaitLoop: a key's wait and a batch's are one loop,
// internal/wait's Loop, the only one that paces polls; a key's wait hears
// its own subscription, without the batch's fan-in (wait.FanIn).
func TestCore_oneWaitLoop(t *testing.T) {
	if got := callers(t, "pollBackOff"); !slices.Equal(got, []string{"Loop"}) {
		t.Errorf("the poll's backoff is made in %v; want Loop alone", got)
	}
	if got := callers(t, "wait.Loop"); !slices.Equal(got, []string{"await", "awaitMany"}) {
		t.Errorf("the wait loop (internal/wait) is run from %v; want await and awaitMany alone", got)
	}
	if got := callers(t, "wait.FanIn"); !slices.Equal(got, []string{"awaitMany"}) {
		t.Errorf("the fan-in (internal/wait) is started from %v; want awaitMany alone", got)
	}
}

// TestCore_manyAtMost250Lines: many.go holds GetMany's entry, its
// settling and the LoadManyFunc adapter; each stage's batch form sits in
// the stage's file.
func TestCore_manyAtMost250Lines(t *testing.T) {
	b, err := os.ReadFile("many.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 250 {
		t.Errorf("many.go has %d lines; want at most 250", n)
	}
}

// TestCore_filesAtMost400Lines: no file of the library (resilience and
// the internal packages under it, tests aside) is over 400 lines.
func TestCore_filesAtMost400Lines(t *testing.T) {
	var files []string
	for _, pattern := range []string{"*.go", "../internal/*/*.go", "../internal/*/*/*.go"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 50 {
		t.Fatalf("found %d files; the globs miss the library", len(files))
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), "\n"); n > 400 {
			t.Errorf("%s has %d lines; want at most 400", f, n)
		}
	}
}
