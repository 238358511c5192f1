package backendtest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemory(t *testing.T) {
	var m backendtest.Memory
	backendtest.Run(t, func(t *testing.T, s backend.Scope) backend.Shared {
		v, err := m.Open(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	})
}
