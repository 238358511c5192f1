package main

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// sample is one contender's result in one round.
type sample struct {
	path, contender string
	round           int
	metrics         map[string]float64 // by unit: "ns/op", "B/op", "rt/op", ...
}

// resultLine matches a benchmark result: the name (less its -GOMAXPROCS
// suffix), the iterations, then value-unit pairs.
var resultLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+(\d+)\s+(\S.*)$`)

// parse reads go test -bench output and returns its results, tagged with
// round. Lines that are not results are skipped.
func parse(r io.Reader, round int) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := resultLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		if len(f)%2 != 0 {
			continue
		}
		s := sample{round: round, metrics: make(map[string]float64, len(f)/2)}
		s.path, s.contender = split(m[1])
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				s.metrics = nil
				break
			}
			s.metrics[f[i+1]] = v
		}
		if s.metrics != nil {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// split cuts a benchmark name into its path (all but the last element)
// and its contender (the last one).
func split(name string) (path, contender string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return name, ""
	}
	return name[:i], name[i+1:]
}
