package main

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// results holds every sample of a run, in the order paths and contenders
// first appeared.
type results struct {
	paths      []string
	contenders map[string][]string
	samples    map[[2]string][]sample // by path and contender
}

func newResults() *results {
	return &results{contenders: map[string][]string{}, samples: map[[2]string][]sample{}}
}

func (r *results) add(ss []sample) {
	for _, s := range ss {
		if _, ok := r.contenders[s.path]; !ok {
			r.paths = append(r.paths, s.path)
		}
		if !slices.Contains(r.contenders[s.path], s.contender) {
			r.contenders[s.path] = append(r.contenders[s.path], s.contender)
		}
		k := [2]string{s.path, s.contender}
		r.samples[k] = append(r.samples[k], s)
	}
}

// sort orders the paths by the position of their benchmark function in
// functions (names without "Benchmark"); others keep their order, last.
func (r *results) sort(functions []string) {
	rank := func(path string) int {
		fn, _, _ := strings.Cut(path, "/")
		if i := slices.Index(functions, fn); i >= 0 {
			return i
		}
		return len(functions)
	}
	slices.SortStableFunc(r.paths, func(a, b string) int { return rank(a) - rank(b) })
}

// extraUnits are the metrics shown after time and allocation, when a path
// reports them.
var extraUnits = []string{"rt/op", "cmds/op"}

// columns returns the units shown for path, and the one its ratios
// compare: bytes per entry for a memory path, else time.
func (r *results) columns(path string) (units []string, primary string) {
	has := func(unit string) bool {
		for _, c := range r.contenders[path] {
			for _, s := range r.samples[[2]string{path, c}] {
				if _, ok := s.metrics[unit]; ok {
					return true
				}
			}
		}
		return false
	}
	if has("B/entry") {
		return []string{"B/entry", "held"}, "B/entry"
	}
	units = []string{"ns/op", "B/op", "allocs/op"}
	for _, u := range extraUnits {
		if has(u) {
			units = append(units, u)
		}
	}
	return units, "ns/op"
}

// write prints, per path, each contender's medians over the rounds, then
// the ratio of each of this project's contenders (those ours matches) to
// each peer: the median of the ratios taken within each round, with their
// range.
func (r *results) write(w io.Writer, ours *regexp.Regexp) {
	for _, path := range r.paths {
		units, primary := r.columns(path)
		fmt.Fprintf(w, "\n%s\n", path)
		rows := [][]string{append(append([]string{"contender"}, units...), "rounds")}
		for _, c := range r.contenders[path] {
			ss := r.samples[[2]string{path, c}]
			row := []string{c}
			for _, u := range units {
				row = append(row, format(u, median(values(ss, u))))
			}
			rows = append(rows, append(row, strconv.Itoa(len(ss))))
		}
		writeTable(w, rows)
		var mine, peers []string
		for _, c := range r.contenders[path] {
			if ours.MatchString(c) {
				mine = append(mine, c)
			} else {
				peers = append(peers, c)
			}
		}
		if len(mine) == 0 || len(peers) == 0 {
			continue
		}
		fmt.Fprintf(w, "  ratio of %s, this project / peer (below 1 = this project better): median [range]\n", primary)
		rows = nil
		for _, m := range mine {
			for _, p := range peers {
				rs := r.ratios(path, m, p, primary)
				if len(rs) == 0 {
					continue
				}
				slices.Sort(rs)
				rows = append(rows, []string{m + " / " + p, fmt.Sprintf("%.2f", median(rs)), fmt.Sprintf("[%.2f-%.2f]", rs[0], rs[len(rs)-1])})
			}
		}
		writeTable(w, rows)
	}
}

// writeTable writes rows indented, the first column left-aligned and the
// others right-aligned, two spaces apart.
func writeTable(w io.Writer, rows [][]string) {
	var width []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		b.WriteString("  ")
		for i, cell := range row {
			pad := strings.Repeat(" ", width[i]-len(cell))
			if i == 0 {
				b.WriteString("  " + cell + pad)
			} else {
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// ratios returns a/b of unit for each round in which both ran.
func (r *results) ratios(path, a, b, unit string) []float64 {
	byRound := map[int]float64{}
	for _, s := range r.samples[[2]string{path, b}] {
		if v, ok := s.metrics[unit]; ok && v > 0 {
			byRound[s.round] = v
		}
	}
	var out []float64
	for _, s := range r.samples[[2]string{path, a}] {
		if d, ok := byRound[s.round]; ok {
			if v, ok := s.metrics[unit]; ok {
				out = append(out, v/d)
			}
		}
	}
	return out
}

func values(ss []sample, unit string) []float64 {
	var out []float64
	for _, s := range ss {
		if v, ok := s.metrics[unit]; ok {
			out = append(out, v)
		}
	}
	return out
}

// median returns the median of vs (the mean of the middle two for an even
// count), or NaN when vs is empty.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func format(unit string, v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case unit == "held" || unit == "rt/op" || unit == "cmds/op":
		return strconv.FormatFloat(v, 'f', 2, 64)
	case unit == "ns/op" && v < 100, unit == "B/entry":
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
