package main

import (
	"regexp"
	"strings"
	"testing"
)

// round0 and round1 are go test -bench output of two rounds, the second
// with its contenders in rotated order.
const round0 = `goos: linux
goarch: amd64
BenchmarkL1Hit/pipeline-2          	20000000	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkL1Hit/otter.GetIfPresent-2	20000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkL2Hit/pipeline+Lock-2     	    2000	     30000 ns/op	         1.000 cmds/op	         0.5000 rt/op	    2871 B/op	      44 allocs/op
BenchmarkL2Hit/go-redis.Get-2      	    2000	     10000 ns/op	         1.000 cmds/op	         1.000 rt/op	     256 B/op	       8 allocs/op
BenchmarkL1Memory/1M/pipeline-2    	       1	13036093011 ns/op	       200.0 B/entry	         0.9965 held
BenchmarkL1Memory/1M/otter-2       	       1	6518431671 ns/op	       100.0 B/entry	         1.000 held
PASS
`

const round1 = `BenchmarkL1Hit/otter.GetIfPresent	20000000	        200.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkL1Hit/pipeline	20000000	       120.0 ns/op	       0 B/op	       0 allocs/op
some log line
BenchmarkL2Hit/go-redis.Get-2      	    2000	     20000 ns/op	         1.000 cmds/op	         1.000 rt/op	     256 B/op	       8 allocs/op
BenchmarkL2Hit/pipeline+Lock-2     	    2000	     20000 ns/op	         1.000 cmds/op	         0.5000 rt/op	    2871 B/op	      44 allocs/op
`

func TestParse(t *testing.T) {
	ss, err := parse(strings.NewReader(round0), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 6 {
		t.Fatalf("got %d samples, want 6: %+v", len(ss), ss)
	}
	s := ss[2]
	if s.path != "L2Hit" || s.contender != "pipeline+Lock" || s.metrics["rt/op"] != 0.5 || s.metrics["allocs/op"] != 44 {
		t.Errorf("got %+v", s)
	}
	if s := ss[4]; s.path != "L1Memory/1M" || s.contender != "pipeline" || s.metrics["B/entry"] != 200 {
		t.Errorf("got %+v", s)
	}
	// Without the -GOMAXPROCS suffix (GOMAXPROCS=1), the name is whole.
	ss, _ = parse(strings.NewReader(round1), 1)
	if ss[0].contender != "otter.GetIfPresent" || ss[0].round != 1 {
		t.Errorf("got %+v", ss[0])
	}
}

func TestWrite_ratiosWithinRounds(t *testing.T) {
	r := newResults()
	for i, out := range []string{round0, round1} {
		ss, err := parse(strings.NewReader(out), i)
		if err != nil {
			t.Fatal(err)
		}
		r.add(ss)
	}
	var b strings.Builder
	r.write(&b, regexp.MustCompile(`^(pipeline|breaker\.)`))
	got := b.String()
	for _, want := range []string{
		// Rounds 0.50 and 0.60: the median of the ratios, not the ratio
		// of the medians (85/150).
		`pipeline / otter.GetIfPresent  0.55  [0.50-0.60]`,
		`pipeline+Lock / go-redis.Get  2.00  [1.00-3.00]`,
		`pipeline / otter  2.00  [2.00-2.00]`,
		"ratio of B/entry",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	// Contenders keep the order of the first round.
	if strings.Index(got, "  pipeline  ") > strings.Index(got, "otter.GetIfPresent  ") {
		t.Errorf("contenders out of order:\n%s", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
