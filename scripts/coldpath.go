//go:build ignore

// Coldpath lists the files of package resilience, and apart those of the
// internal packages it runs on (internal/coord, the seam, and
// internal/loadcall, the loader call), that a cold Get with Redis and Lock
// runs: the files with statements covered by a Build, one cold Get and a
// Close that a Build and a Close alone do not cover (resilience's
// TestColdGetPath, run twice with coverage). It needs redis-server on the
// PATH.
//
//	go run scripts/coldpath.go
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	dir, err := os.MkdirTemp("", "coldpath")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	covered := map[string]map[string]bool{}
	for _, mode := range []string{"base", "get"} {
		out := filepath.Join(dir, mode+".out")
		cmd := exec.Command("go", "test", "-count=1", "-run", "^TestColdGetPath$", "-coverprofile="+out,
			"-coverpkg=./resilience/,./internal/coord/,./internal/loadcall/", "./resilience/")
		cmd.Env = append(os.Environ(), "HERDGUARD_COLD_PATH="+mode)
		cmd.Stderr = os.Stderr
		if b, err := cmd.Output(); err != nil {
			fail(fmt.Errorf("%s: %v\n%s", mode, err, b))
		}
		covered[mode] = blocks(out)
	}
	files := map[string]int{}
	for b := range covered["get"] {
		if !covered["base"][b] {
			files[b[:strings.LastIndex(b, ":")]]++
		}
	}
	for _, pkg := range pkgs {
		var names []string
		for f := range files {
			if strings.HasPrefix(f, pkg+"/") {
				names = append(names, f)
			}
		}
		sort.Strings(names)
		for _, f := range names {
			fmt.Printf("%-40s %3d blocks\n", f, files[f])
		}
		fmt.Printf("%d files of package %s\n", len(names), pkg)
	}
}

// pkgs is the packages whose files coldpath lists, each apart.
var pkgs = []string{"resilience", "internal/coord", "internal/loadcall"}

// blocks is the covered blocks of the files of pkgs (not of their
// subpackages) in the coverage profile at path.
func blocks(path string) map[string]bool {
	f, err := os.Open(path)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[2] == "0" {
			continue // the mode line, or a block not run
		}
		loc := strings.TrimPrefix(fields[0], "github.com/herdguard/herdguard/")
		for _, pkg := range pkgs {
			if strings.HasPrefix(loc, pkg+"/") && !strings.Contains(strings.TrimPrefix(loc, pkg+"/"), "/") {
				out[loc] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		fail(err)
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "coldpath:", err)
	os.Exit(1)
}
