package retryloop

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestShared checks that the pipeline's Retry stage (internal/loadcall,
// the loader call) and httpx run their
// attempts through Run, and that no other code in the repository drives a
// backoff schedule of its own.
func TestShared(t *testing.T) {
	// Files whose backoff schedule retries nothing.
	polls := map[string]bool{
		// Paces the polls of the keys another caller holds locked, for a
		// key and for a batch (pollBackOff).
		"internal/wait/wait.go": true,
		// Paces the announcement subscription's reconnections, which go
		// on until Close; its schedule is a Policy's.
		"internal/rlock/redis_notify.go": true,
	}
	root := filepath.Join("..", "..")
	runs := map[string]bool{} // package directory -> calls retryloop.Run
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "internal/retryloop" || polls[filepath.ToSlash(rel)] {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, _ := sel.X.(*ast.Ident)
			switch {
			case x != nil && x.Name == "retryloop" && sel.Sel.Name == "Run":
				runs[dir] = true
			case sel.Sel.Name == "NextBackOff",
				x != nil && x.Name == "backoff" && (sel.Sel.Name == "Retry" || sel.Sel.Name == "RetryNotify" ||
					strings.HasPrefix(sel.Sel.Name, "New")):
				t.Errorf("%s: %s.%s: a retry schedule outside retryloop", rel, types(sel.X), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"internal/loadcall", "resilience/httpx"} {
		if !runs[dir] {
			t.Errorf("%s does not run its attempts through retryloop.Run", dir)
		}
	}
}

func types(x ast.Expr) string {
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return "…"
}
