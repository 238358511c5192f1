package resilience

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/telemetry"
)

// refreshAsync reloads key in the background, at most once at a time per
// key, for stale-while-revalidate and early refresh. The goroutine is
// counted in p.bg, so Close waits for it; it ends when the load does, which
// FlightTimeout bounds.
//
// after is the write time of the entry that called for the refresh: a
// fresher entry found in L2 (another process refreshed it) ends the
// refresh without a load.
func (p *Pipeline[V]) refreshAsync(ctx context.Context, key string, load LoadFunc[V], after time.Time) {
	if p.closed.Load() {
		return
	}
	if _, busy := p.refreshing.LoadOrStore(key, struct{}{}); busy {
		return
	}
	if !p.bg.add() {
		p.refreshing.Delete(key)
		return
	}
	// A refresh serves no caller: it keeps the caller's values (its span)
	// but not its cancellation.
	rctx := context.WithoutCancel(ctx)
	go func() {
		defer p.bg.done()
		defer p.refreshing.Delete(key)
		fctx, cancel := context.WithTimeout(rctx, p.flightTimeout)
		defer cancel()
		// The refresh's span is a child of the call that started it, in
		// the same trace; it may end after that call's span.
		var sp trace.Span
		fctx, sp = p.tel.Start(fctx, telemetry.SpanRefresh, trace.WithAttributes(p.tel.PipelineAttr))
		refresh := func() (any, error) {
			o := &outcome[V]{refresh: true, after: after}
			return o, p.fetchInto(fctx, key, load, o)
		}
		var err error
		if p.group != nil {
			_, err, _ = p.group.Do(key, refresh)
		} else {
			_, err = refresh()
		}
		if sp != nil {
			if err != nil && !errors.Is(err, ErrNotFound) {
				sp.RecordError(err)
				sp.SetStatus(codes.Error, err.Error())
			}
			sp.End()
		}
	}()
}

// tasks counts a pipeline's background work (shared loads, refreshes) so
// that Close can wait for it. Unlike a bare WaitGroup, it refuses new work
// once closing has begun, so Add never races with Wait.
type tasks struct {
	mu     sync.Mutex // guards closed, and orders add against close
	closed bool
	wg     sync.WaitGroup
}

// add counts one task; it returns false once close has begun.
func (t *tasks) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *tasks) done() { t.wg.Done() }

// close refuses new tasks and waits for the running ones.
func (t *tasks) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}
