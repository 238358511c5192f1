package postgres

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

// Check on a pipeline whose database does not answer names PostgreSQL,
// and no empty key.
func TestCheck_databaseDown_namesPostgreSQL(t *testing.T) {
	f := newFixture(t, Options{})
	pool := newPool(t)
	b, err := New(pool, f.o)
	if err != nil {
		t.Fatal(err)
	}
	p, err := resilience.New[string]("check").Cache(time.Minute).Lock(resilience.LockSettings{}).Backend(b).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ctx := testCtx(t)
	if err := p.Check(ctx); err != nil {
		t.Fatalf("Check of a running database = %v", err)
	}
	pool.Close() // what the pipeline's pool reaches no longer answers
	err = p.Check(ctx)
	var ce *resilience.CheckError
	if !errors.As(err, &ce) {
		t.Fatalf("Check with the pool closed = %v, want a *resilience.CheckError", err)
	}
	msg := err.Error()
	if want := `resilience: pipeline "check": postgresql check: the backend does not answer: postgres: ping: `; !strings.HasPrefix(msg, want) {
		t.Errorf("Check says %q, want it to begin %q", msg, want)
	}
	if strings.Contains(msg, "Redis") || strings.Contains(msg, `""`) {
		t.Errorf("Check says %q: names Redis or an empty name", msg)
	}
}
