package crosspod_test

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The pods' operations (each caller's Get, with the value it returned;
// Set; Invalidate), with the times each call began and returned in its
// pod, make a history that porcupine checks against the model of what
// docs/model.md promises (see consistency). Pods share the machine's
// clock, so the times order calls across pods.

// histOp is one operation of a history: porcupine's input. A Get's output
// is the value it returned.
type histOp struct {
	Op     string // "get", "set", "inval"
	Pod    int
	Key    string
	Value  string // set: the value written
	Call   int64  // when the call began, Unix nanoseconds
	Return int64  // when it returned
}

// staleCopy is a value a pod held (in its L1) when it stopped being the
// key's current value, at Until: the pod may still serve it for as long
// as the model allows.
type staleCopy struct {
	Pod   int
	Value string
	Until int64
}

// regState is the model's state for one key: its current value ("" for
// none: never loaded, or invalidated), the version of that value (a
// load's start, a write's call), the pods that hold it, and the older
// values pods may still serve.
type regState struct {
	cur     string
	ver     int64
	holders []int
	stale   []staleCopy
}

// outage is a time when pods (nil: every pod) could not hear the writes
// of the others: their link to Redis was down, or Redis was, from From
// until the test saw them drop their L1 (To).
type outage struct {
	Pods     []int
	From, To time.Time
}

// consistency is the model of one test's promises:
//
//   - A write (Set, Invalidate) takes effect at some instant within its
//     call; a Set's value, or after an Invalidate no value, is then the
//     key's current value, at the version of the write's call.
//   - A Get returns the current value (and its pod then holds it), or
//     the value of a load that began after the current value's version
//     (a newer one: it becomes current). A load that began before a write
//     or before a newer load never becomes current after it: that is the
//     fence.
//   - A Get may also return an older value its own pod held, if that value
//     stopped being current no more than a window before the Get began:
//     Propagation for a pod that hears the writes (the announcement's
//     delivery), L1TTL for one in an outage (what its L1 may serve while
//     it cannot hear).
type consistency struct {
	L1TTL       time.Duration
	Propagation time.Duration
	Outages     []outage
}

// propagation is the window allowed to a pod that hears the writes: a
// bound far above the delivery of an announcement (a few milliseconds in
// TestWrites_reachEveryPod), far below any L1TTL of these tests and below
// the 200 ms a faulted pod is left serving its L1 in linkFaultDropsL1, so
// that only the outage explains those answers.
const propagation = 100 * time.Millisecond

// window is how long after a value stopped being current pod may serve
// it in a Get that began at call.
func (m consistency) window(pod int, call int64) int64 {
	for _, o := range m.Outages {
		if (o.Pods == nil || slices.Contains(o.Pods, pod)) && call >= o.From.UnixNano() && call <= o.To.UnixNano() {
			return m.L1TTL.Nanoseconds()
		}
	}
	return m.Propagation.Nanoseconds()
}

// replace makes v (of version ver) current at, by pod's write or load:
// every other pod that held the old value may still serve it, from at.
func (s regState) replace(v string, ver, at int64, pod int) regState {
	n := regState{cur: v, ver: ver, stale: slices.Clone(s.stale)}
	if v != "" {
		n.holders = []int{pod}
	}
	if s.cur != "" {
		for _, h := range s.holders {
			if h != pod {
				n.stale = append(n.stale, staleCopy{Pod: h, Value: s.cur, Until: at})
			}
		}
	}
	slices.SortFunc(n.stale, func(a, b staleCopy) int {
		return cmp.Or(cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Value, b.Value), cmp.Compare(a.Until, b.Until))
	})
	return n
}

func (s regState) hold(pod int) regState {
	if slices.Contains(s.holders, pod) {
		return s
	}
	n := s
	n.holders = append(slices.Clone(s.holders), pod)
	slices.Sort(n.holders)
	return n
}

func (m consistency) step(state, input, output any) (bool, any) {
	s, op := state.(regState), input.(histOp)
	switch op.Op {
	case "set":
		return true, s.replace(op.Value, op.Call, op.Return, op.Pod)
	case "inval":
		return true, s.replace("", op.Call, op.Return, op.Pod)
	}
	v := output.(string)
	if v != "" && v == s.cur {
		return true, s.hold(op.Pod)
	}
	if lv, err := parseValue(v); err == nil && lv.Start.UnixNano() > s.ver {
		return true, s.replace(v, lv.Start.UnixNano(), op.Return, op.Pod)
	}
	w := m.window(op.Pod, op.Call)
	for _, c := range s.stale {
		if c.Pod == op.Pod && c.Value == v && c.Until >= op.Call-w {
			return true, s
		}
	}
	return false, s
}

func (m consistency) model() porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, o := range h {
				k := o.Input.(histOp).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], o)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init:  func() any { return regState{} },
		Step:  m.step,
		Equal: func(a, b any) bool { return reflect.DeepEqual(a, b) },
		DescribeOperation: func(in, out any) string {
			op := in.(histOp)
			if op.Op == "get" {
				return fmt.Sprintf("pod %d get(%s) -> %v", op.Pod, op.Key, out)
			}
			return fmt.Sprintf("pod %d %s(%s, %q)", op.Pod, op.Op, op.Key, op.Value)
		},
	}
}

// history returns every operation the pods reported so far: each caller's
// Get that returned a value (one that failed promises nothing), and each
// Set and Invalidate that returned without an error.
func (f *fleet) history() []porcupine.Operation {
	f.mu.Lock()
	defer f.mu.Unlock()
	var h []porcupine.Operation
	for _, p := range f.pods {
		for _, rs := range p.results {
			for _, r := range rs {
				if r.Err != "" || r.From.IsZero() {
					continue
				}
				h = append(h, porcupine.Operation{ClientId: r.Pod,
					Input: histOp{Op: "get", Pod: r.Pod, Key: r.Key, Call: r.From.UnixNano(), Return: r.At.UnixNano()},
					Call:  r.From.UnixNano(), Output: r.Value, Return: r.At.UnixNano()})
			}
		}
	}
	for _, e := range f.others {
		if e.Ev != "written" || e.Err != "" {
			continue
		}
		h = append(h, porcupine.Operation{ClientId: e.Pod,
			Input: histOp{Op: e.Cmd, Pod: e.Pod, Key: e.Key, Value: e.Value, Call: e.FromNS, Return: e.AtNS},
			Call:  e.FromNS, Output: "", Return: e.AtNS})
	}
	return h
}

// checkHistory checks the fleet's history against m with porcupine, and
// fails the test, naming the keys whose operations no order explains,
// unless it is linearizable. It logs the history's size and the check's
// time as FIGURES.
func (f *fleet) checkHistory(m consistency) {
	f.t.Helper()
	if m.Propagation == 0 {
		m.Propagation = propagation
	}
	h := f.history()
	model := m.model()
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(model, h, time.Minute)
	took := time.Since(start)
	keys := len(model.Partition(h))
	f.t.Logf("FIGURES history: %d operations on %d keys, checked %s in %v", len(h), keys, res, took.Round(time.Microsecond))
	if res == porcupine.Ok {
		return
	}
	var bad []string
	for _, part := range model.Partition(h) {
		if porcupine.CheckOperationsTimeout(model, part, time.Minute) != porcupine.Ok {
			bad = append(bad, describeHistory(model, part))
		}
	}
	f.t.Errorf("history not linearizable under the model (%s); the keys no order explains:\n%s", res, strings.Join(bad, "\n"))
}

// describeHistory lists one key's operations by call time.
func describeHistory(m porcupine.Model, ops []porcupine.Operation) string {
	ops = slices.Clone(ops)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	t0 := ops[0].Call
	for _, o := range ops {
		fmt.Fprintf(&b, "  [%+.3fms, %+.3fms] %s\n", float64(o.Call-t0)/1e6, float64(o.Return-t0)/1e6, m.DescribeOperation(o.Input, o.Output))
	}
	return b.String()
}
