package resilience

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

// checkTarget is what [Pipeline.Check] needs to know of the pipeline's
// Redis: the client, where its keys live, and whether it locks.
type checkTarget struct {
	client redis.UniversalClient
	prefix string
	lock   bool
}

// CheckError is what [Pipeline.Check] found wrong with the pipeline's
// Redis or [Backend]. It never names a key.
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
const redisName = "Redis"

// backendName is what a [Backend]'s view is called in a [*CheckError]:
// its System name, or "backend".
func backendName(sh Shared) string {
	if s, ok := sh.(interface{ System() string }); ok && s.System() != "" {
		return s.System()
	}
	return "backend"
}

// probeKey is the cache key whose Redis keys the check names in its
// permission probes. No value is ever read or written there: the probes
// only ask Redis whether the user could.
const probeKey = "\x00herdguard:check"

// checkSource asks Redis, for each group of ARGV (a count n, then a
// command and its n-1 arguments), whether the current user may run it,
// with redis.acl_check_cmd (Redis 7.0 and later). It returns the ordinals
// of the groups denied, or {-1} when this Redis cannot tell. It touches no
// key; KEYS are declared so that Redis checks the user's access to them
// before the script runs, and so that it runs on their Cluster node.
const checkSource = `
local denied = {}
local i, group = 1, 0
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local args = {}
  for j = 1, n do args[j] = ARGV[i + j] end
  group = group + 1
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(args))
  if not ok then
    return {-1}
  end
  if not allowed then
    denied[#denied + 1] = group
  end
  i = i + n + 1
end
return denied
`

var checkScript = redis.NewScript(checkSource)

// probe is one permission the pipeline needs: a command with arguments
// like the pipeline's own, and what it is for.
type probe struct {
	what string
	args []string
}

// probes lists the commands the pipeline sends, directly or from its Lua
// scripts, on the keys and channel of probeKey.
func (t checkTarget) probes(ks rkey.Space) []probe {
	v, l, f, ch := ks.Value(probeKey), ks.Lock(probeKey), ks.Fence(probeKey), ks.Channel()
	ps := []probe{
		{"EVALSHA", []string{"EVALSHA", "0000000000000000000000000000000000000000", "0"}},
		{"SCRIPT LOAD", []string{"SCRIPT", "LOAD", "return 1"}},
		{"HGET", []string{"HGET", v, rkey.FieldData}},
		{"HSET", []string{"HSET", v, rkey.FieldData, "x"}},
		{"TYPE", []string{"TYPE", v}},
		{"PEXPIRE", []string{"PEXPIRE", v, "1"}},
		{"DEL", []string{"DEL", v}},
		{"HGET on the lock keys", []string{"HGET", l, "t"}},
	}
	if t.lock {
		ps = append(ps,
			probe{"HMGET", []string{"HMGET", l, "t"}},
			probe{"HSET on the lock keys", []string{"HSET", l, "t", "x"}},
			probe{"PEXPIRE on the lock keys", []string{"PEXPIRE", l, "1"}},
			probe{"DEL on the lock keys", []string{"DEL", l}},
			probe{"PTTL", []string{"PTTL", l}},
			probe{"GET", []string{"GET", f}},
			probe{"SET", []string{"SET", f, "1", "PX", "1"}},
			probe{"TIME", []string{"TIME"}},
			probe{"PUBLISH on the announcement channel", []string{"PUBLISH", ch, "x"}},
		)
	}
	return ps
}

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
	return p.co.check(ctx)
}

// checkRedis is Check with Redis.
func (p *Pipeline[V]) checkRedis(ctx context.Context) error {
	t := p.redisGuard.check
	fail := func(problem string, err error, missing ...string) error {
		return &CheckError{Pipeline: p.name, Backend: redisName, Problem: problem, Err: err, Missing: missing}
	}
	ks, err := rkey.New(t.prefix, p.name)
	if err != nil {
		return fail("bad key layout", err)
	}
	ps := t.probes(ks)
	argv := make([]any, 0, 4*len(ps))
	for _, pr := range ps {
		argv = append(argv, len(pr.args))
		for _, a := range pr.args {
			argv = append(argv, a)
		}
	}
	keys := []string{ks.Value(probeKey), ks.Lock(probeKey)}
	if t.lock {
		keys = append(keys, ks.Fence(probeKey))
	}
	// EVALSHA, loading the script when Redis does not know it yet.
	denied, err := rscript.Run(ctx, t.client, checkScript, keys, argv...).Int64Slice()
	if err != nil {
		return checkReplyError(p.name, t.prefix, err)
	}
	var missing []string
	if len(denied) != 1 || denied[0] != -1 {
		for _, g := range denied {
			if g >= 1 && int(g) <= len(ps) {
				missing = append(missing, ps[g-1].what)
			}
		}
	}
	if t.lock {
		if err := checkSubscribe(ctx, t.client, ks.Channel()); err != nil {
			if !isDenied(err) {
				return fail("SUBSCRIBE failed", err)
			}
			missing = append(missing, "SUBSCRIBE on the announcement channel")
		}
	}
	if len(missing) > 0 {
		return fail(fmt.Sprintf("the Redis user may not run %s; grant them (ACL SETUSER <user> %s, with ~%s* and &%s*)",
			strings.Join(missing, ", "), aclGrants(missing), t.prefix, t.prefix), nil, missing...)
	}
	return nil
}

// checkSubscribe subscribes to channel until Redis confirms, then leaves.
func checkSubscribe(ctx context.Context, client redis.UniversalClient, channel string) error {
	ps := client.Subscribe(ctx)
	defer ps.Close()
	if err := ps.Subscribe(ctx, channel); err != nil {
		return err
	}
	_, err := ps.Receive(ctx)
	return err
}

// checkReplyError explains the error of the check script's EVALSHA or
// EVAL.
func checkReplyError(pipeline, prefix string, err error) error {
	e := &CheckError{Pipeline: pipeline, Backend: redisName, Err: err}
	var re redis.Error
	switch {
	case !errors.As(err, &re) || errors.Is(err, redis.ErrClosed):
		e.Problem = "Redis does not answer"
	case redis.HasErrorPrefix(re, "WRONGPASS"), redis.HasErrorPrefix(re, "NOAUTH"):
		e.Problem = "Redis refused the client's credentials: check Username and Password in its options"
	case redis.HasErrorPrefix(re, "NOPERM") && strings.Contains(re.Error(), "keys"):
		e.Missing = []string{"access to the pipeline's keys"}
		e.Problem = fmt.Sprintf("the Redis user may not access the pipeline's keys; grant them (ACL SETUSER <user> ~%s*)", prefix)
	case redis.HasErrorPrefix(re, "NOPERM"):
		cmd := "EVALSHA"
		if strings.Contains(strings.ToLower(re.Error()), "'eval'") {
			cmd = "EVAL"
		}
		e.Missing = []string{cmd}
		e.Problem = fmt.Sprintf("the Redis user may not run %s; grant it (ACL SETUSER <user> +%s)", cmd, strings.ToLower(cmd))
	default:
		e.Problem = "Redis refused the check script"
	}
	return e
}

// aclGrants is the ACL rules that grant what missing lists.
func aclGrants(missing []string) string {
	seen := map[string]bool{}
	var rules []string
	for _, m := range missing {
		cmd := strings.ToLower(strings.Fields(m)[0])
		if m == "SCRIPT LOAD" {
			cmd = "script|load" // the subcommand alone
		}
		if !seen[cmd] {
			seen[cmd] = true
			rules = append(rules, "+"+cmd)
		}
	}
	return strings.Join(rules, " ")
}

// isDenied reports whether err is Redis refusing the client's credentials
// or its ACL refusing a command, key or channel: a misconfiguration, not
// an outage. A command refused inside a Lua script comes back as an ERR
// reply that says so.
func isDenied(err error) bool {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false
	}
	for _, prefix := range []string{"NOPERM", "WRONGPASS", "NOAUTH"} {
		if redis.HasErrorPrefix(re, prefix) {
			return true
		}
	}
	return strings.Contains(re.Error(), "can't run this command")
}
