//go:build unix

package file

import (
	"testing"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
)

// TestConformance runs the contract suite of backend.Shared, every view
// on one directory as processes would share it.
func TestConformance(t *testing.T) {
	b, err := New(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	backendtest.Run(t, func(t *testing.T, s backend.Scope) backend.Shared {
		v, err := b.Open(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	})
}
