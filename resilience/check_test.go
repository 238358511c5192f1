package resilience

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/aclcheck"
	"github.com/herdguard/herdguard/internal/redistest"
)

// aclUser creates a Redis user named name with password "pw" and rules,
// and returns a client logged in as it.
func aclUser(t *testing.T, srv *redistest.Server, name string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := srv.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
	return srv.Client(func(o *redis.Options) { o.Username, o.Password, o.MaxRetries = name, "pw", -1 })
}

func TestCheck_embeddedDefault(t *testing.T) {
	p := build(t, New[string]("chk").Cache(time.Minute).SingleFlight())
	if err := p.Check(context.Background()); err != nil {
		t.Fatalf("Check without Redis = %v, want nil", err)
	}
}

// TestCheck_redis: Check passes for a user that may do what the pipeline
// sends, and answers with a *CheckError naming the pipeline, never a key,
// for one that may not (the probes themselves: package internal/aclcheck).
func TestCheck_redis(t *testing.T) {
	srv := redistest.Start(t)
	if err := build(t, New[string]("chk").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{})).Check(context.Background()); err != nil {
		t.Fatalf("Check as the default user = %v, want nil", err)
	}
	client := aclUser(t, srv, "nopub", "~*", "&*", "+@all", "-publish")
	if err := build(t, New[string]("chk").Cache(time.Minute).Redis(client)).Check(context.Background()); err != nil {
		t.Fatalf("Check without PUBLISH, without Lock = %v, want nil", err)
	}
	err := build(t, New[string]("chk").Cache(time.Minute).Redis(client).Lock(LockSettings{})).Check(context.Background())
	var ce *CheckError
	if !errors.As(err, &ce) {
		t.Fatalf("Check = %v, want a *CheckError", err)
	}
	if want := []string{"PUBLISH on the announcement channel"}; !slices.Equal(ce.Missing, want) || ce.Backend != redisName || ce.Pipeline != "chk" {
		t.Fatalf("Check = %+v, want Redis, pipeline chk, missing %q", ce, want)
	}
	if msg := err.Error(); !strings.Contains(msg, "+publish") || !strings.Contains(msg, `pipeline "chk"`) ||
		strings.Contains(msg, "{") || strings.Contains(msg, aclcheck.ProbeKey) {
		t.Fatalf("message %q: want +publish and the pipeline's name, and no key", msg)
	}
}

func TestCheck_redisDown(t *testing.T) {
	srv := redistest.Start(t)
	p := build(t, New[string]("chk").Cache(time.Minute).Redis(srv.Client(func(o *redis.Options) { o.MaxRetries = -1 })))
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	err := p.Check(context.Background())
	var ce *CheckError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("Check with Redis down = %v, want a *CheckError saying Redis does not answer", err)
	}
}

// TestLogger_deniedLoggedAsError: an ACL that denies PUBLISH makes the
// lock winner's write-back script fail; the call still answers (failed
// open), and the log says at once, at level ERROR, that Redis refuses the
// pipeline's commands, even right after an outage was logged.
func TestLogger_deniedLoggedAsError(t *testing.T) {
	srv := redistest.Start(t)
	var out syncBuffer
	client := aclUser(t, srv, "nopub", "~*", "&*", "+@all", "-publish")
	p := build(t, New[string]("denied").Cache(time.Minute).Redis(client).Lock(LockSettings{}).
		Logger(slog.New(slog.NewTextHandler(&out, nil))))
	// An outage episode was just logged: the quiet minute of fail-opens
	// must not hide the misconfiguration.
	p.tel.Log.FailedOpen(context.Background(), "l2_get", "redis_error", errors.New("dial tcp: connection refused"))
	r, err := p.GetResult(context.Background(), "secret-key", func(context.Context, string) (string, error) { return "v", nil })
	if err != nil || r.Value != "v" {
		t.Fatalf("GetResult = %+v, %v; want v", r, err)
	}
	if !r.FailedOpen {
		t.Fatal("the refused write-back did not fail open")
	}
	log := out.String()
	if !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "refuses") || !strings.Contains(log, "reason=redis_denied") {
		t.Fatalf("log lacks the refusal at level ERROR:\n%s", log)
	}
	if strings.Contains(log, "secret-key") {
		t.Fatalf("log names the key:\n%s", log)
	}
}
