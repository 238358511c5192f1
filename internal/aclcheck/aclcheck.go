// Package aclcheck asks Redis, for start-up, whether the user of a
// pipeline's client may run what the pipeline sends (EVALSHA and SCRIPT
// LOAD of its scripts, the commands inside them, HGET, and with a lock,
// PUBLISH and SUBSCRIBE on the announcement channel) on the pipeline's
// keys: see [Run]. It writes nothing to Redis. [IsDenied] tells a refusal
// by the ACL or of the credentials from an outage.
package aclcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

// Finding is what [Run] found wrong: what to change and, when Redis
// answered, what the user may not do. It never names a key.
type Finding struct {
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

// Run checks that the user of client may run what a pipeline named
// namespace sends on its keys under prefix; with lock, what its lock
// sends too. It returns nil when it may. The commands inside the scripts
// are checked with redis.acl_check_cmd, which Redis has from 7.0; older
// servers are checked for the commands the client sends only.
func Run(ctx context.Context, client redis.UniversalClient, prefix, namespace string, lock bool) *Finding {
	fail := func(problem string, err error, missing ...string) *Finding {
		return &Finding{Problem: problem, Err: err, Missing: missing}
	}
	ks, err := rkey.New(prefix, namespace)
	if err != nil {
		return fail("bad key layout", err)
	}
	ps := probes(ks, lock)
	argv := make([]any, 0, 4*len(ps))
	for _, pr := range ps {
		argv = append(argv, len(pr.args))
		for _, a := range pr.args {
			argv = append(argv, a)
		}
	}
	keys := []string{ks.Value(ProbeKey), ks.Lock(ProbeKey)}
	if lock {
		keys = append(keys, ks.Fence(ProbeKey))
	}
	// EVALSHA, loading the script when Redis does not know it yet.
	denied, err := rscript.Run(ctx, client, checkScript, keys, argv...).Int64Slice()
	if err != nil {
		return replyError(prefix, err)
	}
	var missing []string
	if len(denied) != 1 || denied[0] != -1 {
		for _, g := range denied {
			if g >= 1 && int(g) <= len(ps) {
				missing = append(missing, ps[g-1].what)
			}
		}
	}
	if lock {
		if err := subscribe(ctx, client, ks.Channel()); err != nil {
			if !IsDenied(err) {
				return fail("SUBSCRIBE failed", err)
			}
			missing = append(missing, "SUBSCRIBE on the announcement channel")
		}
	}
	if len(missing) > 0 {
		return fail(fmt.Sprintf("the Redis user may not run %s; grant them (ACL SETUSER <user> %s, with ~%s* and &%s*)",
			strings.Join(missing, ", "), aclGrants(missing), prefix, prefix), nil, missing...)
	}
	return nil
}

// ProbeKey is the cache key whose Redis keys the check names in its
// permission probes. No value is ever read or written there: the probes
// only ask Redis whether the user could.
const ProbeKey = "\x00herdguard:check"

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
// scripts, on the keys and channel of ProbeKey; with lock, those of the
// lock too.
func probes(ks rkey.Space, lock bool) []probe {
	v, l, f, ch := ks.Value(ProbeKey), ks.Lock(ProbeKey), ks.Fence(ProbeKey), ks.Channel()
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
	if lock {
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

// subscribe subscribes to channel until Redis confirms, then leaves.
func subscribe(ctx context.Context, client redis.UniversalClient, channel string) error {
	ps := client.Subscribe(ctx)
	defer ps.Close()
	if err := ps.Subscribe(ctx, channel); err != nil {
		return err
	}
	_, err := ps.Receive(ctx)
	return err
}

// replyError explains the error of the check script's EVALSHA or EVAL.
func replyError(prefix string, err error) *Finding {
	e := &Finding{Err: err}
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

// IsDenied reports whether err is Redis refusing the client's credentials
// or its ACL refusing a command, key or channel: a misconfiguration, not
// an outage. A command refused inside a Lua script comes back as an ERR
// reply that says so.
func IsDenied(err error) bool {
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
