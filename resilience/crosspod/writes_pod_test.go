package crosspod_test

import (
	"context"
	"time"
)

// watchPoll is how often a watching pod looks at its keys: often enough
// to resolve a propagation delay of a fraction of a millisecond, seldom
// enough to leave the pod's CPU to its subscription.
const watchPoll = 200 * time.Microsecond

// writeOp runs the write ops in pod p; it reports false for an op it does
// not know.
//
//   - "set": Set(Key, Value); then a "written" event with its time.
//   - "inval": Invalidate(Key); then a "written" event with its time.
//   - "watch": Peek each of Keys until it no longer returns Values[i];
//     a "watching" event once every key was seen holding its old value
//     (or an Err naming one that did not), then a "gone" event per key
//     with the time it stopped.
//   - "peek": one Peek of Key: a "peeked" event with the value ("" for
//     none) and the source "l1" if L1 answered.
//   - "stats": a "stats" event with the pipeline's DuplicateLoads.
func (p *pod) writeOp(c command) bool {
	switch c.Op {
	case "set", "inval":
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		defer cancel()
		var err error
		began := time.Now()
		if c.Op == "set" {
			err = p.pipe.Set(ctx, c.Key, c.Value)
		} else {
			err = p.pipe.Invalidate(ctx, c.Key)
		}
		ev := event{Ev: "written", Pod: p.cfg.Pod, ID: c.ID, Key: c.Key, Cmd: c.Op, Value: c.Value,
			AtNS: time.Now().UnixNano(), FromNS: began.UnixNano()}
		if err != nil {
			ev.Err = err.Error()
		}
		p.em.Emit(ev)
	case "watch":
		p.calls.Go(func() { p.watch(c) })
	case "stats":
		p.em.Emit(event{Ev: "stats", Pod: p.cfg.Pod, ID: c.ID, Dups: p.pipe.Stats().DuplicateLoads})
	case "peek":
		v, found, err := p.pipe.Peek(p.ctx, c.Key)
		ev := event{Ev: "peeked", Pod: p.cfg.Pod, ID: c.ID, Key: c.Key}
		if found {
			ev.Value = v
		}
		if err != nil {
			ev.Err = err.Error()
		}
		p.em.Emit(ev)
	default:
		return false
	}
	return true
}

func (p *pod) watch(c command) {
	holds := func(i int) bool {
		v, found, err := p.pipe.Peek(p.ctx, c.Keys[i])
		return err == nil && found && v == c.Values[i]
	}
	for i, k := range c.Keys {
		if !holds(i) {
			p.em.Emit(event{Ev: "watching", Pod: p.cfg.Pod, ID: c.ID, Key: k, Err: "does not hold its old value"})
			return
		}
	}
	p.em.Emit(event{Ev: "watching", Pod: p.cfg.Pod, ID: c.ID})
	left := make(map[int]bool, len(c.Keys))
	for i := range c.Keys {
		left[i] = true
	}
	deadline := time.Now().Add(time.Minute)
	for len(left) > 0 && time.Now().Before(deadline) && p.ctx.Err() == nil {
		for i := range left {
			if !holds(i) {
				p.em.Emit(event{Ev: "gone", Pod: p.cfg.Pod, ID: c.ID, Key: c.Keys[i], AtNS: time.Now().UnixNano()})
				delete(left, i)
			}
		}
		time.Sleep(watchPoll)
	}
	for i := range left {
		p.em.Emit(event{Ev: "gone", Pod: p.cfg.Pod, ID: c.ID, Key: c.Keys[i], Err: "still served after a minute"})
	}
}
