package coord

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/aclcheck"
)

// RedisName is what a [Finding] calls Redis.
const RedisName = "Redis"

// Finding is what Check found wrong with the pipeline's Redis or
// [backend.Backend]; package resilience reports it as a *CheckError. It
// never names a key.
type Finding struct {
	// Backend names what was checked: [RedisName], or a Backend's System
	// name ("postgresql", "file"), or "backend" for one without a System
	// method.
	Backend string
	// Missing lists what the Redis user may not do, one entry per command
	// or access ("PUBLISH on the announcement channel", "access to the
	// pipeline's keys"); empty when Redis did not answer or refused the
	// credentials.
	Missing []string
	// Problem says what is wrong and what to change.
	Problem string
	// Err is what Redis or the connection said, if anything.
	Err error
}

// checkTarget is what Check needs to know of the pipeline's Redis: the
// client, where its keys live (prefix and namespace), and whether it
// locks.
type checkTarget struct {
	client    redis.UniversalClient
	prefix    string
	namespace string
	lock      bool
}

// checkRedis is Check with Redis: the ACL probes of package
// internal/aclcheck, for the user of client, on the keys of namespace
// under prefix, and with lock, on what the lock sends too.
func checkRedis(client redis.UniversalClient, prefix, namespace string, lock bool) func(context.Context) *Finding {
	return checkTarget{client: client, prefix: prefix, namespace: namespace, lock: lock}.check
}

func (t checkTarget) check(ctx context.Context) *Finding {
	if f := aclcheck.Run(ctx, t.client, t.prefix, t.namespace, t.lock); f != nil {
		return &Finding{Backend: RedisName, Problem: f.Problem, Err: f.Err, Missing: f.Missing}
	}
	return nil
}

// checkBackend is Check with a backend: its Ping, since a backend checks
// itself.
func checkBackend(sh backend.Shared) func(context.Context) *Finding {
	return func(ctx context.Context) *Finding {
		if err := sh.Ping(ctx); err != nil {
			return &Finding{Backend: backendName(sh), Problem: "the backend does not answer", Err: err}
		}
		return nil
	}
}

// backendName is what a [backend.Backend]'s view is called in a
// [Finding]: its System name, or "backend".
func backendName(sh backend.Shared) string {
	if s, ok := sh.(interface{ System() string }); ok && s.System() != "" {
		return s.System()
	}
	return "backend"
}
