//go:build ignore

// Testreport reads the output of go test -json, as scripts/test saves it.
//
//	go test -json ./... | go run scripts/testreport.go -progress
//	go run scripts/testreport.go -summary run1.json run2.json ...
//
// With -progress it prints, as the events come, one line per package and
// the output of each failing test, much as go test does without -json.
// With -summary it lists every test (or package, when no single test is to
// blame: a build error, a crash, a timeout, a leak found by TestMain) that
// failed at least once in the given logs, how often out of how many runs,
// and the output of its first failure; it exits 1 if there is any.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action      string
	Package     string
	ImportPath  string // of build-output events
	FailedBuild string // of a package's fail event: the import path whose build failed
	Test        string
	Elapsed     float64
	Output      string
}

// maxLines bounds the output kept for one failure.
const maxLines = 80

func main() {
	progress := flag.Bool("progress", false, "print progress from the go test -json stream on stdin")
	summary := flag.Bool("summary", false, "summarise the failures in the named go test -json logs")
	flag.Parse()
	switch {
	case *progress:
		streamProgress(os.Stdin, os.Stdout)
	case *summary:
		r := newReport()
		for _, name := range flag.Args() {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, "testreport:", err)
				os.Exit(2)
			}
			r.read(f, name)
			f.Close()
		}
		if r.print(os.Stdout) {
			os.Exit(1)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: testreport -progress < log.json | testreport -summary log.json...")
		os.Exit(2)
	}
}

// scan calls fn for each event of r. A line that is not an event (a
// message of the go command) is handed over as the output of an event with
// an empty Action.
func scan(r io.Reader, fn func(e event)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fn(event{Output: string(line) + "\n"})
			continue
		}
		if e.Action == "build-output" {
			e.Package, e.Test = e.ImportPath, ""
		}
		fn(e)
	}
}

// outputs keeps the recent output lines of each test (and of each package,
// under the empty test name) until its outcome is known.
type outputs map[[2]string][]string

func (o outputs) add(e event) {
	if isMarker(e.Output) {
		return
	}
	k := [2]string{e.Package, e.Test}
	lines := append(o[k], e.Output)
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	o[k] = lines
}

// isMarker reports whether line only marks which test runs (go test -v
// prints them; the output is already sorted by test here).
func isMarker(line string) bool {
	for _, m := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, m) {
			return true
		}
	}
	return false
}

func (o outputs) take(pkg, test string) string {
	k := [2]string{pkg, test}
	s := strings.Join(o[k], "")
	delete(o, k)
	return s
}

func streamProgress(r io.Reader, w io.Writer) {
	out := outputs{}
	scan(r, func(e event) {
		switch e.Action {
		case "":
			fmt.Fprint(w, e.Output)
		case "output", "build-output":
			out.add(e)
		case "fail":
			if e.Test != "" {
				fmt.Fprint(w, out.take(e.Package, e.Test))
				return
			}
			// The package's own output ends with its FAIL line.
			fmt.Fprint(w, out.take(e.FailedBuild, ""), out.take(e.Package, ""))
		case "pass", "skip":
			text := out.take(e.Package, e.Test)
			if e.Test != "" {
				return
			}
			// Only the package's "ok" or "?" line, as go test prints.
			for line := range strings.Lines(text) {
				if strings.HasPrefix(line, "ok  \t") || strings.HasPrefix(line, "?   \t") {
					fmt.Fprint(w, line)
				}
			}
		}
	})
}

// failure is one test, or one package as a whole, that failed.
type failure struct {
	pkg, test   string
	fails, runs int
	first       string // output of the first failure
	log         string // the log it was found in
}

type report struct {
	failures map[[2]string]*failure
	runs     map[[2]string]int
}

func newReport() *report {
	return &report{failures: map[[2]string]*failure{}, runs: map[[2]string]int{}}
}

// read adds the events of one log. A package that failed while none of its
// tests did is reported as a package.
func (r *report) read(f io.Reader, name string) {
	out := outputs{}
	testFailed := map[string]bool{} // by package, since its last outcome
	var failed [][2]string          // tests of the log that failed, for parents
	scan(f, func(e event) {
		k := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output", "build-output":
			out.add(e)
		case "pass":
			out.take(e.Package, e.Test)
			r.runs[k]++
			if e.Test == "" {
				delete(testFailed, e.Package)
			}
		case "skip":
			out.take(e.Package, e.Test)
		case "fail":
			text := out.take(e.Package, e.Test)
			r.runs[k]++
			switch {
			case e.Test != "":
				testFailed[e.Package] = true
				failed = append(failed, k)
				r.add(k, text, name)
			case !testFailed[e.Package]:
				r.add(k, out.take(e.FailedBuild, "")+text, name)
			}
			if e.Test == "" {
				delete(testFailed, e.Package)
			}
		}
	})
	// A test whose subtest failed failed because of it: name only the
	// subtest.
	for _, k := range failed {
		for _, sub := range failed {
			if sub[0] == k[0] && strings.HasPrefix(sub[1], k[1]+"/") {
				delete(r.failures, k)
				break
			}
		}
	}
}

func (r *report) add(k [2]string, text, log string) {
	f := r.failures[k]
	if f == nil {
		f = &failure{pkg: k[0], test: k[1], first: text, log: log}
		r.failures[k] = f
	}
	f.fails++
}

// print writes the summary and reports whether anything failed.
func (r *report) print(w io.Writer) bool {
	var fs []*failure
	for k, f := range r.failures {
		f.runs = r.runs[k]
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b *failure) int {
		return strings.Compare(a.pkg+" "+a.test, b.pkg+" "+b.test)
	})
	if len(fs) == 0 {
		fmt.Fprintln(w, "no test failed")
		return false
	}
	fmt.Fprintf(w, "%d failing:\n", len(fs))
	for _, f := range fs {
		what := f.test
		if what == "" {
			what = "(the package: a build error, a crash, a timeout or TestMain)"
		}
		fmt.Fprintf(w, "  %s %s: failed %d of %d runs\n", f.pkg, what, f.fails, max(f.runs, f.fails))
	}
	for _, f := range fs {
		fmt.Fprintf(w, "\n=== first failure of %s %s (in %s)\n%s", f.pkg, f.test, f.log, f.first)
	}
	return true
}
