package resilience

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// goid returns the current goroutine's number, from its stack header.
func goid(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 || string(f[0]) != "goroutine" {
		t.Fatalf("unexpected stack header %q", buf)
	}
	n, err := strconv.Atoi(string(f[1]))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A Keyless pipeline without Timeout runs fn on the caller's goroutine,
// with no deadline but the caller's: no timer, no goroutine.
func TestDo_keylessWithoutTimeout_runsOnCallersGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *Builder[int]
	}{
		{"bare", New[int]("bare").Keyless()},
		{"breaker", New[int]("br").Keyless().Breaker(breaker.Settings{})},
		{"retry", New[int]("retry").Keyless().Retry(RetrySettings{MaxAttempts: 2, Initial: time.Millisecond})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := build(t, tc.b)
			caller := goid(t)
			v, err := p.Do(context.Background(), func(ctx context.Context) (int, error) {
				if d, ok := ctx.Deadline(); ok {
					t.Errorf("fn's context has a deadline, %v from now; want none", time.Until(d))
				}
				if g := goid(t); g != caller {
					t.Errorf("fn ran on goroutine %d, the caller is %d: want the caller's", g, caller)
				}
				return 7, nil
			})
			if err != nil || v != 7 {
				t.Fatalf("Do = %v, %v", v, err)
			}
		})
	}
}

// CallTimeout still bounds a Keyless call that has no Timeout.
func TestDo_keylessWithoutTimeout_callTimeoutBounds(t *testing.T) {
	p := build(t, New[int]("call").Keyless().CallTimeout(time.Hour))
	_, err := p.Do(context.Background(), func(ctx context.Context) (int, error) {
		d, ok := ctx.Deadline()
		if !ok || time.Until(d) > time.Hour {
			t.Errorf("deadline %v (set %v), want CallTimeout's hour at most", time.Until(d), ok)
		}
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// With Timeout, Do returns at the deadline even when fn ignores its
// context; fn finishes later on a goroutine of its own.
func TestDo_timeout_returnsAtDeadlineWhenFnIgnoresContext(t *testing.T) {
	p := build(t, New[int]("deaf").Keyless().Timeout(20*time.Millisecond).DefaultValue(-1))
	release, finished := make(chan struct{}), make(chan struct{})
	caller := goid(t)
	r, err := p.DoResult(context.Background(), func(ctx context.Context) (int, error) {
		defer close(finished)
		if _, ok := ctx.Deadline(); !ok {
			t.Error("fn's context has no deadline under Timeout")
		}
		if goid(t) == caller {
			t.Error("fn ran on the caller's goroutine: Do could not return at the deadline")
		}
		select { // deaf to ctx
		case <-release:
		case <-time.After(10 * time.Second): // Do did not return: fail, not hang
		}
		return 1, nil
	})
	close(release)
	<-finished
	if err != nil || r.Source != SourceDefault || !errors.Is(r.Cause, ErrTimeout) {
		t.Fatalf("DoResult = %+v, %v; want the default for ErrTimeout", r, err)
	}
}

// A keyed pipeline keeps DefaultTimeout per attempt.
func TestGet_keyedKeepsDefaultTimeout(t *testing.T) {
	p := build(t, New[int]("keyed").Cache(time.Minute))
	_, err := p.Get(context.Background(), "k", func(ctx context.Context, _ string) (int, error) {
		d, ok := ctx.Deadline()
		if left := time.Until(d); !ok || left > DefaultTimeout || left < DefaultTimeout-5*time.Second {
			t.Errorf("attempt deadline %v from now (set %v), want about DefaultTimeout (%v)", left, ok, DefaultTimeout)
		}
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The context of a timed attempt behaves as context.WithTimeout's would:
// values and an earlier deadline from the caller, the caller's
// cancellation, context.Cause, contexts derived from it, AfterFunc.
func TestDo_timeout_attemptContext(t *testing.T) {
	type key struct{}
	const timeout = 30 * time.Millisecond
	p := build(t, New[string]("actx").Keyless().Timeout(timeout))

	t.Run("value, deadline, derived context and cause at the deadline", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		defer cancel()
		start := time.Now()
		returned, finished := make(chan struct{}), make(chan struct{})
		_, err := p.Do(parent, func(ctx context.Context) (string, error) {
			defer close(finished)
			if ctx.Value(key{}) != "v" {
				t.Error("the caller's value is lost")
			}
			if d, ok := ctx.Deadline(); !ok || d.Before(start) || d.After(time.Now().Add(timeout)) {
				t.Errorf("deadline %v, %v; want within the timeout", d, ok)
			}
			child, stop := context.WithCancel(ctx)
			defer stop()
			<-child.Done()
			<-returned // and the caller cancelled its own context since
			if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) || ctx.Err() != context.DeadlineExceeded {
				t.Errorf("at the deadline: Err %v, Cause %v; want DeadlineExceeded", ctx.Err(), context.Cause(ctx))
			}
			if child.Err() != context.DeadlineExceeded {
				t.Errorf("derived context ended with %v, want DeadlineExceeded", child.Err())
			}
			return "", child.Err()
		})
		cancel()
		close(returned)
		<-finished
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
	})

	t.Run("caller's earlier deadline", func(t *testing.T) {
		parent, cancel := context.WithTimeout(context.Background(), timeout/3)
		defer cancel()
		want, _ := parent.Deadline()
		_, err := p.Do(parent, func(ctx context.Context) (string, error) {
			if d, _ := ctx.Deadline(); !d.Equal(want) {
				t.Errorf("deadline %v, want the caller's %v", d, want)
			}
			<-ctx.Done()
			return "", ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want the caller's DeadlineExceeded, not the attempt's timeout", err)
		}
	})

	t.Run("caller cancels", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		seen := make(chan error, 1)
		_, err := p.Do(parent, func(ctx context.Context) (string, error) {
			cancel()
			<-ctx.Done()
			seen <- ctx.Err()
			return "", ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want Canceled", err)
		}
		if got := <-seen; got != context.Canceled {
			t.Fatalf("fn's context ended with %v, want Canceled", got)
		}
	})

	t.Run("AfterFunc and its stop", func(t *testing.T) {
		ran := make(chan struct{})
		var stopped bool
		_, err := p.Do(context.Background(), func(ctx context.Context) (string, error) {
			stopped = context.AfterFunc(ctx, func() { t.Error("a stopped AfterFunc ran") })()
			context.AfterFunc(ctx, func() { close(ran) })
			return "ok", nil
		})
		if err != nil || !stopped {
			t.Fatalf("err %v, stop reported %v", err, stopped)
		}
		select {
		case <-ran: // the attempt's context ends when it returns
		case <-time.After(10 * time.Second):
			t.Fatal("AfterFunc did not run when the attempt returned")
		}
	})
}

// An attempt's deadline holds even for fn that never blocks, polling its
// context's Err: the caller may not have had the chance to arm a timer.
func TestDo_timeout_busyFnSeesDeadline(t *testing.T) {
	const timeout = 20 * time.Millisecond
	p := build(t, New[int]("busy").Keyless().Timeout(timeout).DefaultValue(-1))
	start := time.Now()
	r, err := p.DoResult(context.Background(), func(ctx context.Context) (int, error) {
		for ctx.Err() == nil {
			if time.Since(start) > 10*time.Second {
				return 0, errors.New("the deadline never came")
			}
		}
		if ctx.Err() != context.DeadlineExceeded {
			t.Errorf("Err = %v, want DeadlineExceeded", ctx.Err())
		}
		select {
		case <-ctx.Done():
		default:
			t.Error("Err reports the deadline but Done is open")
		}
		return 0, ctx.Err()
	})
	if err != nil || r.Source != SourceDefault || !errors.Is(r.Cause, ErrTimeout) {
		t.Fatalf("DoResult = %+v, %v; want the default for ErrTimeout", r, err)
	}
	if d := time.Since(start); d < timeout {
		t.Fatalf("returned after %v, before the %v deadline", d, timeout)
	}
}
