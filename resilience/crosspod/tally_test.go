package crosspod_test

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// tally sums a set of call results.
type tally struct {
	calls      int
	errs       []string // "pod N: message", at most a few
	errCount   int
	failedOpen int
	sources    map[string]int
	values     map[string]int
	maxLatency time.Duration
}

func tallyOf(rs ...[]callResult) tally {
	t := tally{sources: map[string]int{}, values: map[string]int{}}
	for _, set := range rs {
		for _, r := range set {
			t.calls++
			if r.Err != "" {
				t.errCount++
				if len(t.errs) < 3 {
					t.errs = append(t.errs, fmt.Sprintf("pod %d: %s", r.Pod, r.Err))
				}
			} else {
				t.values[r.Value]++
			}
			if r.FailedOpen {
				t.failedOpen++
			}
			t.sources[r.Source]++
			t.maxLatency = max(t.maxLatency, r.Latency)
		}
	}
	return t
}

// only reports whether every call succeeded with value v.
func (t tally) only(v string) bool {
	return t.errCount == 0 && len(t.values) == 1 && t.values[v] == t.calls
}

func (t tally) String() string {
	vals := slices.Sorted(maps.Keys(t.values))
	s := fmt.Sprintf("%d calls, %d errors %v, %d failed open, sources %v, values:", t.calls, t.errCount, t.errs, t.failedOpen, t.sources)
	for _, v := range vals {
		s += fmt.Sprintf(" %s x%d", v, t.values[v])
	}
	return s
}

// describe names a load for failure messages.
func describe(l loadEvent) string {
	return fmt.Sprintf("pod %d (%s)", l.Pod, l.Value)
}

func describeAll(ls []loadEvent) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = describe(l)
	}
	return out
}
