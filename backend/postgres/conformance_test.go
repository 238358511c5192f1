package postgres

import (
	"testing"

	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/resilience"
)

// TestConformance runs the contract of resilience.Shared on views opened,
// as different processes open them, on backends of their own.
func TestConformance(t *testing.T) {
	f := newFixture(t, Options{})
	backendtest.Run(t, func(t *testing.T, s resilience.BackendScope) resilience.Shared {
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
	backendtest.Run(t, func(t *testing.T, s resilience.BackendScope) resilience.Shared {
		v, err := f.backend().Open(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	})
}
