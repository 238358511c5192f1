package resilience

import (
	"context"
	"fmt"

	"github.com/herdguard/herdguard/internal/aclcheck"
	"github.com/herdguard/herdguard/internal/coord"
)

// CheckError is what [Pipeline.Check] found wrong with the pipeline's
// Redis or [backend.Backend]. It never names a key.
type CheckError struct {
	Pipeline string
	// Backend names what was checked: "Redis", or a Backend's System
	// name ("postgresql", "file"), or "backend" for one without a System
	// method. Empty means "Redis".
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

func (e *CheckError) Error() string {
	checked := e.Backend
	if checked == "" {
		checked = redisName
	}
	msg := fmt.Sprintf("resilience: pipeline %q: %s check: %s", e.Pipeline, checked, e.Problem)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *CheckError) Unwrap() error { return e.Err }

// redisName is CheckError.Backend for Redis.
const redisName = coord.RedisName

// Check verifies, for start-up, that the pipeline can use its Redis: the
// server answers, it accepts the client's credentials, and its ACL lets
// the user run what the pipeline sends (EVALSHA and SCRIPT LOAD of the scripts,
// the commands inside them, HGET, and with Lock, PUBLISH and SUBSCRIBE on
// the announcement channel) on the pipeline's keys. A pipeline that
// cannot would fail open on every call; Check says so at once instead,
// with a [*CheckError] naming what is missing (never a key).
//
// Check writes nothing to Redis and does not go through the Redis
// breaker. It returns nil for a pipeline without Redis (the embedded
// default). With a [Builder.Backend], Check is the backend's Ping, and a
// failure is a [*CheckError] that names the backend and wraps its error.
// The commands inside the scripts are checked with redis.acl_check_cmd,
// which Redis has from 7.0; older servers are checked for the commands the
// client sends only.
func (p *Pipeline[V]) Check(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	if p.closed.Load() {
		return ErrClosed
	}
	if p.co == nil {
		return nil
	}
	if f := p.co.Check(ctx); f != nil {
		return &CheckError{Pipeline: p.name, Backend: f.Backend, Problem: f.Problem, Err: f.Err, Missing: f.Missing}
	}
	return nil
}

// isDenied reports whether err is Redis refusing the client's credentials
// or its ACL refusing a command, key or channel: a misconfiguration, not
// an outage (see aclcheck.IsDenied).
func isDenied(err error) bool { return aclcheck.IsDenied(err) }
