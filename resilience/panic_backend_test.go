package resilience_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/resilience"
)

// panickyBackend opens views of a backendtest.Memory whose Load panics: a
// backend's bug, which reaches the pipeline's own code.
type panickyBackend struct{ m backendtest.Memory }

func (b *panickyBackend) Open(s backend.Scope) (backend.Shared, error) {
	sh, err := b.m.Open(s)
	if err != nil {
		return nil, err
	}
	return panickyView{sh}, nil
}

type panickyView struct{ backend.Shared }

func (panickyView) Load(context.Context, string) ([]byte, error) { panic("backend boom") }

// notifyPanicky opens views of a backendtest.Memory whose Notify panics:
// a backend's bug in a release, which runs as background work.
type notifyPanicky struct{ m backendtest.Memory }

func (b *notifyPanicky) Open(s backend.Scope) (backend.Shared, error) {
	sh, err := b.m.Open(s)
	if err != nil {
		return nil, err
	}
	return notifyPanickyView{sh}, nil
}

type notifyPanickyView struct{ backend.Shared }

func (notifyPanickyView) Notify(context.Context, string) error { panic("notify boom") }

// TestPanicError_pipelineStage: a panic that escapes the stages that run
// user code (here a backend's Load, under the look) is a PanicError of
// stage "pipeline", for Get and for each key of GetMany, and the process
// goes on.
func TestPanicError_pipelineStage(t *testing.T) {
	ctx := context.Background()
	p := buildOver(t, resilience.New[string]("panic-pipeline").Cache(time.Minute).
		Lock(resilience.LockSettings{}).Backend(&panickyBackend{}))
	load := func(context.Context, string) (string, error) { return "v", nil }
	check := func(call string, err error) {
		t.Helper()
		var pe *resilience.PanicError
		if !errors.As(err, &pe) || pe.Stage != "pipeline" || len(pe.Stack) == 0 {
			t.Errorf("%s: err = %v, want a *PanicError of stage \"pipeline\" with a stack", call, err)
		}
	}
	_, err := p.Get(ctx, "k", load)
	check("Get", err)
	_, err = p.GetMany(ctx, []string{"a", "b"}, func(_ context.Context, keys []string) (map[string]string, error) {
		out := map[string]string{}
		for _, k := range keys {
			out[k] = "v"
		}
		return out, nil
	})
	var ke resilience.KeyErrors
	if !errors.As(err, &ke) || len(ke) != 2 {
		t.Fatalf("GetMany: err = %v, want KeyErrors for both keys", err)
	}
	for k, err := range ke {
		check("GetMany "+k, err)
	}
}

// TestPanic_inBackgroundWork_isLoggedNotFatal: a backend that panics in
// the release after a failed load (background work, no caller to tell)
// does not end the process: the panic is logged with its stack, the call
// returns its loader's error, and Close returns.
func TestPanic_inBackgroundWork_isLoggedNotFatal(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	p, err := resilience.New[string]("panic-background").Cache(time.Minute).
		Lock(resilience.LockSettings{}).Backend(&notifyPanicky{}).
		Logger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))).Build()
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("down")
	_, err = p.Get(context.Background(), "k", func(context.Context, string) (string, error) { return "", down })
	if !errors.Is(err, down) {
		t.Errorf("Get: err = %v, want the loader's", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if out := logged.String(); !strings.Contains(out, "background work panicked") || !strings.Contains(out, "notify boom") {
		t.Errorf("log = %q, want the panic logged", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
