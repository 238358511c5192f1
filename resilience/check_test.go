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

func TestCheck_redis(t *testing.T) {
	srv := redistest.Start(t)
	all := []string{"~*", "&*", "+@all"}
	cases := []struct {
		name    string
		lock    bool
		client  func() *redis.Client
		missing []string // nil: Check passes
		problem string   // part of the message
	}{
		{name: "default user, lock", lock: true, client: func() *redis.Client { return srv.Client() }},
		{name: "all granted, lock", lock: true, client: func() *redis.Client { return aclUser(t, srv, "ok", all...) }},
		{name: "no PUBLISH, no lock: not needed", client: func() *redis.Client { return aclUser(t, srv, "nopub1", append(all, "-publish")...) }},
		{name: "no PUBLISH, lock", lock: true,
			client:  func() *redis.Client { return aclUser(t, srv, "nopub2", append(all, "-publish")...) },
			missing: []string{"PUBLISH on the announcement channel"}, problem: "+publish"},
		{name: "no SUBSCRIBE, lock", lock: true,
			client:  func() *redis.Client { return aclUser(t, srv, "nosub", append(all, "-subscribe")...) },
			missing: []string{"SUBSCRIBE on the announcement channel"}, problem: "+subscribe"},
		{name: "no EVALSHA", client: func() *redis.Client { return aclUser(t, srv, "nosha", append(all, "-evalsha")...) },
			missing: []string{"EVALSHA"}, problem: "+evalsha"},
		{name: "no HSET, no TIME, lock", lock: true,
			client:  func() *redis.Client { return aclUser(t, srv, "nohset", append(all, "-hset", "-time")...) },
			missing: []string{"HSET", "HSET on the lock keys", "TIME"}, problem: "+hset +time"},
		{name: "other keys only", client: func() *redis.Client { return aclUser(t, srv, "nokeys", "~other:*", "&*", "+@all") },
			missing: []string{"access to the pipeline's keys"}, problem: "~hg:*"},
		{name: "other channels only, lock", lock: true,
			client:  func() *redis.Client { return aclUser(t, srv, "nochan", "~*", "resetchannels", "&other", "+@all") },
			missing: []string{"PUBLISH on the announcement channel", "SUBSCRIBE on the announcement channel"}, problem: "&hg:*"},
		{name: "wrong password", client: func() *redis.Client {
			aclUser(t, srv, "pw", all...)
			return srv.Client(func(o *redis.Options) { o.Username, o.Password, o.MaxRetries = "pw", "wrong", -1 })
		}, missing: []string{}, problem: "credentials"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := New[string]("chk").Cache(time.Minute).Redis(tc.client())
			if tc.lock {
				b = b.Lock(LockSettings{})
			}
			err := build(t, b).Check(context.Background())
			if tc.missing == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var ce *CheckError
			if !errors.As(err, &ce) {
				t.Fatalf("Check = %v, want a *CheckError", err)
			}
			if !slices.Equal(ce.Missing, tc.missing) && !(len(tc.missing) == 0 && ce.Missing == nil) {
				t.Fatalf("missing %q, want %q (%v)", ce.Missing, tc.missing, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.problem) || !strings.Contains(msg, `pipeline "chk"`) ||
				strings.Contains(msg, "{") || strings.Contains(msg, probeKey) {
				t.Fatalf("message %q: want %q and the pipeline's name, and no key", msg, tc.problem)
			}
		})
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
	p.logs.failedOpen(context.Background(), "l2_get", "redis_error", errors.New("dial tcp: connection refused"))
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
