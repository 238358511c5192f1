package resilience

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPanicError_stages: a panicking loader is a PanicError of stage
// "loader", a panicking Default one of stage "default". (A panicking
// Codec is a codec error, ErrCodec: the value is served and not stored;
// "pipeline", the third stage, is TestPanicError_pipelineStage's.)
func TestPanicError_stages(t *testing.T) {
	ctx := context.Background()
	boom := func(context.Context, string) (string, error) { panic("loader boom") }
	for _, tc := range []struct {
		name, stage string
		pipeline    *Builder[string]
		call        func(p *Pipeline[string]) error
	}{
		{"loader", "loader", New[string]("panic-loader").Cache(time.Minute),
			func(p *Pipeline[string]) error { _, err := p.Get(ctx, "k", boom); return err }},
		{"default", "default", New[string]("panic-default").Cache(time.Minute).
			Default(func(context.Context, string, error) (string, error) { panic("default boom") }),
			func(p *Pipeline[string]) error {
				_, err := p.Get(ctx, "k", func(context.Context, string) (string, error) { return "", errors.New("down") })
				return err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := build(t, tc.pipeline)
			err := tc.call(p)
			var pe *PanicError
			if !errors.As(err, &pe) || pe.Stage != tc.stage || len(pe.Stack) == 0 {
				t.Fatalf("err = %v, want a *PanicError of stage %q with a stack", err, tc.stage)
			}
		})
	}
}
