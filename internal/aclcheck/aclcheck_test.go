package aclcheck

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

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

// TestRun: Run finds what the user of a client may not do, and says what
// to grant, naming no key.
func TestRun(t *testing.T) {
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
			client := tc.client()
			defer client.Close()
			f := Run(context.Background(), client, "hg:", "chk", tc.lock)
			if tc.missing == nil {
				if f != nil {
					t.Fatalf("Run = %+v, want nil", f)
				}
				return
			}
			if f == nil {
				t.Fatalf("Run = nil, want missing %q", tc.missing)
			}
			if !slices.Equal(f.Missing, tc.missing) && !(len(tc.missing) == 0 && f.Missing == nil) {
				t.Fatalf("missing %q, want %q (%+v)", f.Missing, tc.missing, f)
			}
			if !strings.Contains(f.Problem, tc.problem) || strings.Contains(f.Problem, "{") || strings.Contains(f.Problem, ProbeKey) {
				t.Fatalf("problem %q: want %q, and no key", f.Problem, tc.problem)
			}
		})
	}
}

// TestRun_redisDown: a Redis that does not answer is a finding of its
// own, not a missing permission.
func TestRun_redisDown(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(func(o *redis.Options) { o.MaxRetries = -1 })
	defer client.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	f := Run(context.Background(), client, "hg:", "chk", true)
	if f == nil || f.Problem != "Redis does not answer" || f.Missing != nil || f.Err == nil {
		t.Fatalf("Run with Redis down = %+v, want that Redis does not answer, with its error", f)
	}
}

// TestIsDenied: a refusal by the ACL or of the credentials is a denial;
// another reply, or no reply, is not.
func TestIsDenied(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("dial tcp: connection refused"), false},
		{redis.ErrClosed, false},
		{proto("NOPERM User u has no permissions to run the 'publish' command"), true},
		{proto("WRONGPASS invalid username-password pair"), true},
		{proto("NOAUTH Authentication required."), true},
		{proto("ERR Error running script: The user executing the script can't run this command or subcommand"), true},
		{proto("ERR unknown command"), false},
	} {
		if got := IsDenied(tc.err); got != tc.want {
			t.Errorf("IsDenied(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// proto is a Redis error reply.
type proto string

func (e proto) Error() string { return string(e) }
func (proto) RedisError()     {}
