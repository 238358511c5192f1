package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/herdguard/herdguard/internal/podproc"
	"github.com/herdguard/herdguard/resilience"
)

// A pod's GetMany (podConfig.Many).

// summary is a pod's report of one GetMany with podConfig.Summary: the
// keys its loader loaded, and each key's value and source.
type summary struct {
	Loaded  []string          `json:"loaded"`
	Values  map[string]string `json:"values"`
	Sources map[string]string `json:"sources"`
	Errs    map[string]string `json:"errs,omitempty"`
	TookUS  int64             `json:"took_us"`
}

// coldKeys returns cold:0 to cold:n-1.
func coldKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("cold:%d", i)
	}
	return keys
}

// manyPod asks c.Keys in one GetMany and reports each key's load and
// result, then done.
func manyPod(ctx context.Context, c podConfig, em *podproc.Writer, many manyFunc) {
	load := func(ctx context.Context, keys []string) (map[string]string, error) {
		for _, k := range keys {
			em.Emit(event{Ev: "load", Pod: c.Pod, Key: k})
		}
		t := time.NewTimer(c.Load)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = fmt.Sprintf("%s@pod%d", k, c.Pod)
		}
		return m, nil
	}
	var mu sync.Mutex
	var loaded []string
	if c.Summary {
		load = func(ctx context.Context, keys []string) (map[string]string, error) {
			mu.Lock()
			loaded = append(loaded, keys...)
			mu.Unlock()
			t := time.NewTimer(c.Load)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			m := make(map[string]string, len(keys))
			for _, k := range keys {
				m[k] = fmt.Sprintf("%s@pod%d", k, c.Pod)
			}
			return m, nil
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	rs, err := many(cctx, c.Keys, load)
	took := time.Since(start)
	if c.Summary {
		sm := &summary{Values: make(map[string]string, len(c.Keys)), Sources: make(map[string]string, len(c.Keys)),
			Errs: map[string]string{}, TookUS: took.Microseconds()}
		var ke resilience.KeyErrors
		for _, k := range c.Keys {
			r := rs[k]
			src := r.Source.String()
			if r.FailedOpen {
				src += failedOpen(r.FailOpenCause)
			}
			sm.Values[k], sm.Sources[k] = r.Value, src
			switch {
			case errors.As(err, &ke):
				if ke[k] != nil {
					sm.Errs[k] = ke[k].Error()
				}
			case err != nil:
				sm.Errs[k] = err.Error()
			}
		}
		mu.Lock()
		sm.Loaded = loaded
		mu.Unlock()
		em.Emit(event{Ev: "done", Pod: c.Pod, N: len(c.Keys), Summary: sm})
		return
	}
	for _, k := range c.Keys {
		r := rs[k]
		ev := event{Ev: "result", Pod: c.Pod, Key: k, Value: r.Value, Source: r.Source.String()}
		if r.FailedOpen {
			ev.Source += failedOpen(r.FailOpenCause)
		}
		var ke resilience.KeyErrors
		switch {
		case errors.As(err, &ke):
			if ke[k] != nil {
				ev.Err = ke[k].Error()
			}
		case err != nil:
			ev.Err = err.Error()
		}
		em.Emit(ev)
	}
	em.Emit(event{Ev: "done", Pod: c.Pod, N: len(c.Keys)})
}
