package postgres

import (
	"testing"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
)

// TestConformance runs the contract of backend.Shared on views opened,
// as different processes open them, on backends of their own.
func TestConformance(t *testing.T) {
	f := newFixture(t, Options{})
	backendtest.Run(t, func(t *testing.T, s backend.Scope) backend.Shared {
		v, err := f.backend().Open(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	})
}

// TestConformance_unlogged runs it with the value table UNLOGGED.
func TestConformance_unlogged(t *testing.T) {
	f := newFixture(t, Options{Unlogged: true})
	backendtest.Run(t, func(t *testing.T, s backend.Scope) backend.Shared {
		v, err := f.backend().Open(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	})
}
