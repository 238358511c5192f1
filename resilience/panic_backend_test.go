package resilience_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/resilience"
)

// panickyBackend opens views of a backendtest.Memory whose Load panics: a
// backend's bug, which reaches the pipeline's own code.
type panickyBackend struct{ m backendtest.Memory }

func (b *panickyBackend) Open(s resilience.BackendScope) (resilience.Shared, error) {
	sh, err := b.m.Open(s)
	if err != nil {
		return nil, err
	}
	return panickyView{sh}, nil
}

type panickyView struct{ resilience.Shared }

func (panickyView) Load(context.Context, string) ([]byte, error) { panic("backend boom") }

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
