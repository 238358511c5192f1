package fallback

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

var errLoad = errors.New("load failed")

func TestChain_Resolve_order(t *testing.T) {
	errDefault := errors.New("default failed")
	dflt := Value("default")
	failing := func(context.Context, string, error) (string, error) { return "", errDefault }
	cases := []struct {
		name     string
		chain    Chain[string]
		cause    error
		hasStale bool
		want     string
		wantSrc  Source
		wantErr  []error // each must match with errors.Is; nil means no error
	}{
		{"no cause", Chain[string]{Default: dflt}, nil, true, "", None, nil},
		{"stale first", Chain[string]{Default: dflt}, errLoad, true, "stale", Stale, nil},
		{"default without stale", Chain[string]{Default: dflt}, errLoad, false, "default", Default, nil},
		{"NoStale skips stale", Chain[string]{NoStale: true, Default: dflt}, errLoad, true, "default", Default, nil},
		{"nothing: the error", Chain[string]{}, errLoad, false, "", None, []error{errLoad}},
		{"zero chain serves stale", Chain[string]{}, errLoad, true, "stale", Stale, nil},
		{"caller canceled: no fallback", Chain[string]{Default: dflt}, context.Canceled, true, "", None, []error{context.Canceled}},
		{"wrapped cancel too", Chain[string]{Default: dflt}, fmt.Errorf("x: %w", context.Canceled), true, "", None, []error{context.Canceled}},
		{"Handles refuses", Chain[string]{Default: dflt, Handles: func(error) bool { return false }}, errLoad, true, "", None, []error{errLoad}},
		{"Handles may take cancel", Chain[string]{Default: dflt, Handles: func(error) bool { return true }}, context.Canceled, false, "default", Default, nil},
		{"default fails: both errors", Chain[string]{Default: failing}, errLoad, false, "", None, []error{errDefault, errLoad}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, src, err := tc.chain.Resolve(context.Background(), "k", tc.cause, "stale", tc.hasStale)
			if v != tc.want || src != tc.wantSrc {
				t.Fatalf("Resolve = %q, %v; want %q, %v", v, src, tc.want, tc.wantSrc)
			}
			if tc.wantErr == nil && err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			for _, w := range tc.wantErr {
				if !errors.Is(err, w) {
					t.Fatalf("err = %v, want it to match %v", err, w)
				}
			}
		})
	}
}

func TestChain_Default_getsKeyAndCause(t *testing.T) {
	var gotKey string
	var gotCause error
	c := Chain[int]{Default: func(_ context.Context, key string, cause error) (int, error) {
		gotKey, gotCause = key, cause
		return 7, nil
	}}
	if v, src, err := c.Resolve(context.Background(), "user:1", errLoad, 0, false); v != 7 || src != Default || err != nil {
		t.Fatalf("Resolve = %v %v %v", v, src, err)
	}
	if gotKey != "user:1" || gotCause != errLoad {
		t.Fatalf("Default saw key %q cause %v", gotKey, gotCause)
	}
}

func TestDefaultError_unwrapsBoth(t *testing.T) {
	inner := errors.New("default store down")
	var err error = &DefaultError{Err: fmt.Errorf("wrapped: %w", inner), Cause: errLoad}
	if !errors.Is(err, inner) || !errors.Is(err, errLoad) {
		t.Fatalf("%v does not match both errors", err)
	}
	var de *DefaultError
	if !errors.As(fmt.Errorf("call: %w", err), &de) || de.Cause != errLoad {
		t.Fatalf("errors.As through a wrapper failed: %v", de)
	}
	want := "fallback: default failed: wrapped: default store down (after: load failed)"
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestSource_String(t *testing.T) {
	for s, want := range map[Source]string{None: "none", Stale: "stale", Default: "default", Source(9): "none"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
}
