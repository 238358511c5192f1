package resilience

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/telemetry"
)

// loadAndStore calls the loader and stores what it returns (a value, or a
// not-found when negative caching is on) in L2 and L1, under g's lease
// (nil: unlocked).
func (p *Pipeline[V]) loadAndStore(ctx context.Context, key string, load LoadFunc[V], g *grant, o *outcome[V]) error {
	lctx, ttl := withLoaderTTL(ctx) // for SetTTL
	v, took, err := p.callLoader(lctx, key, load)
	notFound := errors.Is(err, ErrNotFound)
	if err != nil && !(notFound && p.negTTL > 0) {
		if notFound {
			o.res = Result[V]{Source: SourceLoader, NotFound: true, FailedOpen: o.res.FailedOpen}
		}
		return err
	}
	var fence int64
	if g != nil {
		fence = g.lease.Fence()
	}
	e := p.newEntry(v, notFound, took, fence)
	p.applyLoaderTTL(&e, ttl)
	p.store(ctx, key, e, g, o)
	o.res.Source = SourceLoader
	if notFound {
		o.res.NotFound = true
		return ErrNotFound
	}
	o.res.Value = v
	return nil
}

// newEntry stamps a loaded value with its times.
func (p *Pipeline[V]) newEntry(v V, notFound bool, took time.Duration, fence int64) cache.Entry[V] {
	now := time.Now()
	ttl, grace := p.ttl, p.grace
	if notFound {
		ttl, grace = p.negTTL, 0
	}
	ttl = cache.Jitter(ttl, p.jitter)
	return cache.Entry[V]{
		Value: v, NotFound: notFound,
		Written: now, Expires: now.Add(ttl), StaleUntil: now.Add(ttl + grace),
		LoadDuration: took, Fence: fence,
	}
}

// callLoader runs the loader behind the breaker, retry and timeout. It
// returns how long the successful (or last) attempt took.
func (p *Pipeline[V]) callLoader(ctx context.Context, key string, load LoadFunc[V]) (V, time.Duration, error) {
	return p.callFunc(ctx, key, loader[V]{load: load})
}

// loader is the user's function of a call: a keyed load, or a keyless
// [DoFunc], carried as it is so that no adapter closure is allocated.
type loader[V any] struct {
	load LoadFunc[V]
	do   DoFunc[V]
}

func (l loader[V]) call(ctx context.Context, key string) (V, error) {
	if l.do != nil {
		return l.do(ctx)
	}
	return l.load(ctx, key)
}

// callFunc is callLoader for either kind of function.
func (p *Pipeline[V]) callFunc(ctx context.Context, key string, fn loader[V]) (V, time.Duration, error) {
	if p.retry == nil {
		v, took, err := p.attempt(ctx, key, fn, 1)
		return v, took, unwrapPermanent(err)
	}
	var took time.Duration
	var failure func(error) bool
	if p.isFailure != nil {
		failure = p.countsAsFailure
	}
	v, err := retry(ctx, p.retry, failure, func(n int) (V, error) {
		var v V
		var err error
		v, took, err = p.attempt(ctx, key, fn, n)
		return v, err
	})
	return v, took, err
}

// attempt is one loader call: breaker, timeout, panic recovery, span.
func (p *Pipeline[V]) attempt(ctx context.Context, key string, fn loader[V], n int) (V, time.Duration, error) {
	var zero V
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanLoad, trace.WithAttributes(telemetry.Attempt.Int(n)))
		defer sp.End()
	}
	// The clock is read only for what needs the duration: a keyed load
	// (stamped on its entry) or metrics. The breaker reads its own for a
	// slow-call threshold.
	timed := fn.do == nil || p.tel.Metering()
	var v V
	var took time.Duration
	var err error
	ran := false
	run := func() error {
		ran = true
		if sp != nil && p.br != nil {
			sp.SetAttributes(telemetry.BreakerState.String(p.br.State().String()))
		}
		var start time.Time
		if timed {
			start = time.Now()
		}
		v, err = p.runTimed(ctx, key, fn)
		if timed {
			took = time.Since(start)
		}
		if ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			// The flight's or the caller's own deadline, not the loader's
			// fault: it counts neither way.
			return breaker.Ignore
		}
		return err
	}
	if p.br == nil {
		_ = run()
	} else if refused := p.br.Execute(run); !ran {
		if sp != nil {
			sp.SetAttributes(telemetry.BreakerState.String(p.br.State().String()))
			sp.AddEvent("breaker refused the call")
		}
		return zero, 0, refused
	}
	p.stats.loads.Add(1)
	if p.tel.Metering() {
		p.tel.Load(ctx, loadOutcome(err), took)
	}
	if sp != nil && err != nil && !errors.Is(err, ErrNotFound) {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	return v, took, err
}

func loadOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	}
	return reason(err)
}

// runTimed calls fn with the attempt timeout. When fn ignores its context
// past the timeout, the attempt returns anyway and fn's goroutine finishes
// on its own; its result is dropped. Without a timeout (a Keyless pipeline
// without [Builder.Timeout]) fn runs on the caller's goroutine, with no
// timer and no goroutine.
//
// An attempt that finishes within the slice it is given first, as most
// do, costs one allocation, a pooled goroutine start and no timer: the
// timer that ends the attempt's context at its deadline is armed only
// when the caller has to wait.
func (p *Pipeline[V]) runTimed(ctx context.Context, key string, fn loader[V]) (V, error) {
	if p.timeout <= 0 {
		return safeLoad(ctx, key, fn)
	}
	a := &timedAttempt[V]{parent: ctx, deadline: monoNow() + int64(p.timeout), key: key, fn: fn}
	goRun(a)
	// Yield once before waiting: fn, started on this P, usually finishes
	// within that slice, and then nothing has to wake this goroutine.
	runtime.Gosched()
	if a.state.Load() != attemptFinished && !a.wait() {
		var zero V
		if err := ctx.Err(); err != nil {
			a.cancel(err)
			return zero, err
		}
		return zero, timedOut("loader attempt", p.timeout, context.DeadlineExceeded)
	}
	expired := a.finish() == context.DeadlineExceeded
	if a.err != nil && expired && ctx.Err() == nil {
		return a.v, timedOut("loader attempt", p.timeout, a.err)
	}
	return a.v, a.err
}

// attemptEpoch is the base of attempt deadlines: monoNow reads only the
// monotonic clock, which is all a deadline needs.
var attemptEpoch = time.Now()

// monoNow returns the monotonic time in nanoseconds since attemptEpoch.
func monoNow() int64 { return int64(time.Since(attemptEpoch)) }

// States of a timedAttempt.
const (
	attemptRunning uint32 = iota
	attemptFinished
	attemptWaited // the caller waits on wake
)

// timedAttempt is one attempt run on a goroutine of its own, and the
// context it runs under: the caller's, with the attempt's deadline. It is
// one allocation where context.WithTimeout and a result channel would be
// several. The caller's goroutine propagates the caller's cancellation
// while it waits; fn's result is read only once fn has finished, and an
// attempt given up at its deadline writes into it unread.
type timedAttempt[V any] struct {
	parent   context.Context
	deadline int64 // the attempt's own, on monoNow
	key      string
	fn       loader[V]
	v        V
	err      error
	state    atomic.Uint32
	wake     chan struct{} // made by a caller that waits, closed by run

	mu     sync.Mutex
	done   chan struct{} // made on demand, closed by cancel
	cause  error         // why the context ended, nil while it lives
	afters []*afterFunc
}

// afterFunc is a function registered with [timedAttempt.AfterFunc].
type afterFunc struct {
	f    func()
	over bool // ran or stopped
}

func (a *timedAttempt[V]) run() {
	a.v, a.err = safeLoad(a, a.key, a.fn)
	if !a.state.CompareAndSwap(attemptRunning, attemptFinished) {
		close(a.wake) // the caller waits
	}
}

// task is work for goRun.
type task interface{ run() }

// runner starts a task on a new goroutine. Runners are pooled, with their
// goroutine function made once, so that starting a task allocates nothing:
// a go statement that passes an argument allocates a closure for it.
type runner struct {
	t  task
	fn func()
}

var runners sync.Pool

// goRun runs t.run on a goroutine of its own.
func goRun(t task) {
	r, _ := runners.Get().(*runner)
	if r == nil {
		r = new(runner)
		r.fn = r.start
	}
	r.t = t
	go r.fn()
}

func (r *runner) start() {
	t := r.t
	r.t = nil
	runners.Put(r)
	t.run()
}

// wait blocks until fn finishes (true), or the attempt's deadline or the
// caller's cancellation ends it (false). It arms the deadline's timer.
func (a *timedAttempt[V]) wait() bool {
	a.wake = make(chan struct{})
	if !a.state.CompareAndSwap(attemptRunning, attemptWaited) {
		return true // finished meanwhile
	}
	if d := time.Duration(a.deadline - monoNow()); d > 0 {
		t := time.AfterFunc(d, a.expire)
		defer t.Stop()
	} else {
		a.expire()
	}
	select {
	case <-a.wake:
		return true
	case <-a.Done():
		return false
	case <-a.parent.Done():
		return false
	}
}

// finish ends the context of an attempt whose fn has returned, and returns
// why it had ended before, if it had.
func (a *timedAttempt[V]) finish() error {
	a.mu.Lock()
	cause := a.cause
	a.mu.Unlock()
	if cause == nil && a.err != nil && monoNow() >= a.deadline {
		cause = context.DeadlineExceeded // past the deadline the timer was not armed for
	}
	a.cancel(context.Canceled)
	return cause
}

func (a *timedAttempt[V]) expire() { a.cancel(context.DeadlineExceeded) }

// cancel ends the context with err, once.
func (a *timedAttempt[V]) cancel(err error) {
	a.mu.Lock()
	if a.cause != nil {
		a.mu.Unlock()
		return
	}
	a.cause = err
	if a.done != nil {
		close(a.done)
	}
	afters := a.afters
	a.afters = nil
	for _, f := range afters {
		f.over = true
	}
	a.mu.Unlock()
	for _, f := range afters {
		go f.f()
	}
}

// Deadline is the attempt's deadline, or the caller's if it is earlier.
func (a *timedAttempt[V]) Deadline() (time.Time, bool) {
	own := attemptEpoch.Add(time.Duration(a.deadline))
	if d, ok := a.parent.Deadline(); ok && d.Before(own) {
		return d, true
	}
	return own, true
}

// Done is closed when the attempt's deadline passes, when the caller's
// context ends, and when the attempt returns.
func (a *timedAttempt[V]) Done() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = make(chan struct{})
		if a.cause != nil {
			close(a.done)
		}
	}
	return a.done
}

// Err is why the context ended. Until the caller arms the timer, a
// deadline that has passed is noticed here.
func (a *timedAttempt[V]) Err() error {
	a.mu.Lock()
	cause := a.cause
	a.mu.Unlock()
	if cause == nil && monoNow() >= a.deadline {
		a.expire()
		return a.Err()
	}
	return cause
}

// Value is the caller's context's, except for the standard library's
// lookup of the nearest cancelable context: this context ends on its own,
// so context.Cause and derived contexts must consult it, not a parent.
func (a *timedAttempt[V]) Value(key any) any {
	if key == cancelCtxKey && cancelCtxKey != nil {
		return nil
	}
	return a.parent.Value(key)
}

// AfterFunc arranges for f to run on its own goroutine once the context
// ends, as [context.AfterFunc] does; contexts derived from this one use
// it instead of a goroutine each.
func (a *timedAttempt[V]) AfterFunc(f func()) (stop func() bool) {
	e := &afterFunc{f: f}
	a.mu.Lock()
	if a.cause != nil {
		e.over = true
		go f()
	} else {
		a.afters = append(a.afters, e)
	}
	a.mu.Unlock()
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if e.over {
			return false
		}
		e.over = true
		for i, x := range a.afters {
			if x == e {
				a.afters = append(a.afters[:i], a.afters[i+1:]...)
				break
			}
		}
		return true
	}
}

func (a *timedAttempt[V]) String() string {
	d, _ := a.Deadline()
	return "resilience.attemptContext(" + d.String() + ")"
}

// cancelCtxKey is the key the standard library's context package looks up
// to find a context's nearest cancelable ancestor, learned from a probe
// (nil if the package stops looking it up that way).
var cancelCtxKey = func() any {
	p := keyProbe{Context: context.Background()}
	_ = context.Cause(&p)
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}

// Err says the probe ended, so that context.Cause looks further.
func (p *keyProbe) Err() error { return context.Canceled }

// safeLoad calls fn and turns a panic into a [*PanicError].
func safeLoad[V any](ctx context.Context, key string, fn loader[V]) (v V, err error) {
	defer recoverPanic("loader", &err)
	return fn.call(ctx, key)
}

// userIsFailure runs the user's IsFailure hook; a panic there counts the
// error as a failure.
func (p *Pipeline[V]) userIsFailure(err error) (failure bool) {
	defer func() {
		if recover() != nil {
			failure = true
		}
	}()
	return p.isFailure(err)
}

// countsAsFailure is the loader breaker's default failure test: the
// pipeline's IsFailure, never a not-found nor a caller's cancellation.
func (p *Pipeline[V]) countsAsFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, context.Canceled):
		return false
	case p.isFailure != nil:
		var pe *PanicError
		if errors.As(err, &pe) || errors.Is(err, ErrTimeout) {
			return true
		}
		return p.userIsFailure(err)
	}
	return true
}

func isBreakerRefusal(err error) bool {
	return errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrTooManyProbes)
}

// breakerObserver returns the OnStateChange of the pipeline's breakers: the
// user's callbacks, then a metric. Breakers call it outside their locks.
func (p *Pipeline[V]) breakerObserver(own, all func(string, breaker.State, breaker.State)) func(string, breaker.State, breaker.State) {
	return func(name string, from, to breaker.State) {
		p.logs.breakerChange(name, from, to)
		for _, fn := range [...]func(string, breaker.State, breaker.State){own, all} {
			if fn != nil {
				callSafely(fn, name, from, to)
			}
		}
		if p.tel != nil && p.tel.Metering() {
			p.tel.BreakerState(context.Background(), name, int64(to))
		}
	}
}

// callSafely calls a user's breaker callback: a panic there must not take
// down the call that happened to move the breaker.
func callSafely(fn func(string, breaker.State, breaker.State), name string, from, to breaker.State) {
	defer func() { _ = recover() }()
	fn(name, from, to)
}

// MinLoaderTTL is the shortest TTL a loader can give its value with
// [SetTTL].
const MinLoaderTTL = time.Second

// loaderTTL carries a TTL from the loader to the pipeline.
type loaderTTL struct{ d atomic.Int64 }

type loaderTTLKey struct{}

// SetTTL, called by a [LoadFunc] with the context the pipeline gave it,
// sets the TTL of the value it is about to return: from a Cache-Control
// max-age, or a row's expiry. The TTL is clamped to [MinLoaderTTL, the
// Cache ttl]; jitter and the Stale grace apply to it as to the Cache ttl,
// and L1 keeps it no longer than L1TTL. It has no effect on a not-found,
// which keeps NegativeTTL. SetTTL reports false, doing nothing, when ctx
// does not come from a pipeline's load.
func SetTTL(ctx context.Context, d time.Duration) bool {
	if ctx == nil {
		return false
	}
	h, ok := ctx.Value(loaderTTLKey{}).(*loaderTTL)
	if !ok {
		return false
	}
	h.d.Store(int64(max(d, MinLoaderTTL)))
	return true
}

// withLoaderTTL gives the loader's context a place for SetTTL.
func withLoaderTTL(ctx context.Context) (context.Context, *loaderTTL) {
	h := new(loaderTTL)
	return context.WithValue(ctx, loaderTTLKey{}, h), h
}

// applyLoaderTTL re-times e with the TTL its loader set, if any.
func (p *Pipeline[V]) applyLoaderTTL(e *cache.Entry[V], h *loaderTTL) {
	d := time.Duration(h.d.Load())
	if d == 0 || e.NotFound {
		return
	}
	ttl := cache.Jitter(min(d, p.ttl), p.jitter)
	e.Expires = e.Written.Add(ttl)
	e.StaleUntil = e.Expires.Add(p.grace)
}
