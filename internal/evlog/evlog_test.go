package evlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// capture is a Log of the pipeline "p" into a buffer, at every level.
func capture() (*Log, *bytes.Buffer) {
	var out bytes.Buffer
	h := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})
	return &Log{Logger: slog.New(h), Pipeline: "p"}, &out
}

// redisReply is an error reply of Redis.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

var errDown = errors.New("dial tcp: connection refused")

// TestLog_FailedOpen_oncePerQuietMinute: an episode of fail-opens is
// logged at its first call, then not again until it has been quiet for
// a minute.
func TestLog_FailedOpen_oncePerQuietMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, out := capture()
		count := func() int { return strings.Count(out.String(), "calls go on without it") }
		for range 10 {
			g.FailedOpen(context.Background(), "l2_get", "redis_error", errDown)
		}
		if n := count(); n != 1 {
			t.Fatalf("10 fail-opens logged %d times, want once:\n%s", n, out)
		}
		time.Sleep(quiet - time.Second) // the bubble's clock
		g.FailedOpen(context.Background(), "l2_get", "redis_error", errDown)
		if n := count(); n != 1 {
			t.Fatalf("a fail-open inside the quiet minute was logged (%d records):\n%s", n, out)
		}
		time.Sleep(time.Second) // the bubble's clock: a minute since the first
		g.FailedOpen(context.Background(), "l2_get", "redis_error", errDown)
		if n := count(); n != 2 {
			t.Fatalf("a fail-open a minute after the first: %d records, want 2:\n%s", n, out)
		}
		if !strings.Contains(out.String(), "level=WARN") || !strings.Contains(out.String(), "pipeline=p") {
			t.Fatalf("the record lacks its level or the pipeline:\n%s", out)
		}
	})
}

// TestLog_FailedOpen_deniedInsideQuietMinute: a refusal by Redis's ACL
// is logged at level ERROR at once, even inside the quiet minute of an
// outage that was just logged; it has a quiet minute of its own.
func TestLog_FailedOpen_deniedInsideQuietMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, out := capture()
		g.FailedOpen(context.Background(), "l2_get", "redis_error", errDown)
		denied := redisReply("NOPERM User u has no permissions to run the 'publish' command")
		g.FailedOpen(context.Background(), "l2_set", "redis_denied", fmt.Errorf("commit: %w", denied))
		log := out.String()
		if n := strings.Count(log, "level=ERROR"); n != 1 || !strings.Contains(log, "refuses the pipeline's credentials") {
			t.Fatalf("the refusal is not logged at level ERROR (%d records):\n%s", n, log)
		}
		if !strings.Contains(log, "reason=redis_denied") || !strings.Contains(log, "NOPERM") {
			t.Fatalf("the refusal lacks its reason or Redis's reply:\n%s", log)
		}
		g.FailedOpen(context.Background(), "l2_set", "redis_denied", denied)
		if n := strings.Count(out.String(), "level=ERROR"); n != 1 {
			t.Fatalf("a second refusal inside its quiet minute was logged (%d records):\n%s", n, out)
		}
	})
}

// TestLog_FailedOpen_keysNeverLogged: only the root cause of an error is
// logged, without the wrapping messages that name the key.
func TestLog_FailedOpen_keysNeverLogged(t *testing.T) {
	for _, root := range []error{errDown, redisReply("NOAUTH Authentication required.")} {
		g, out := capture()
		err := fmt.Errorf("resilience: pipeline p: key %q: %w", "secret-key", fmt.Errorf("HGET secret-key: %w", root))
		g.FailedOpen(context.Background(), "l2_get", "redis_error", err)
		log := out.String()
		if strings.Contains(log, "secret-key") {
			t.Fatalf("the log names the key:\n%s", log)
		}
		if !strings.Contains(log, root.Error()) {
			t.Fatalf("the log lacks the root cause %q:\n%s", root, log)
		}
	}
}

// TestLog_DecryptFailed_sharesCorruptQuietMinute: an entry that did not
// decrypt is logged with its reason, through the corrupt entries' quiet
// minute.
func TestLog_DecryptFailed_sharesCorruptQuietMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, out := capture()
		g.DecryptFailed(context.Background(), "key id 7 unknown")
		g.CorruptEntry(context.Background())
		log := out.String()
		if !strings.Contains(log, "did not decrypt") || !strings.Contains(log, `reason="key id 7 unknown"`) {
			t.Fatalf("the decrypt failure is not logged with its reason:\n%s", log)
		}
		if strings.Contains(log, "unusable data") {
			t.Fatalf("a corrupt entry inside the decrypt failure's quiet minute was logged:\n%s", log)
		}
		time.Sleep(quiet) // the bubble's clock
		g.CorruptEntry(context.Background())
		if !strings.Contains(out.String(), "unusable data in Redis treated as a miss") {
			t.Fatalf("a corrupt entry after the quiet minute is not logged:\n%s", out)
		}
	})
}

// TestLog_Panicked: a panic of background work is logged at level ERROR
// with its value and stack.
func TestLog_Panicked(t *testing.T) {
	g, out := capture()
	g.Panicked(context.Background(), "boom", []byte("goroutine 7 [running]"))
	log := out.String()
	for _, want := range []string{"level=ERROR", "background work panicked", "panic=boom", `stack="goroutine 7 [running]"`} {
		if !strings.Contains(log, want) {
			t.Fatalf("the record lacks %s:\n%s", want, log)
		}
	}
}

// TestLog_BreakerChange: every transition is logged, an opening at level
// WARN, the others at INFO.
func TestLog_BreakerChange(t *testing.T) {
	g, out := capture()
	g.BreakerChange("redis", breaker.Closed, breaker.Open)
	g.BreakerChange("redis", breaker.Open, breaker.HalfOpen)
	g.BreakerChange("redis", breaker.HalfOpen, breaker.Open)
	log := out.String()
	if n := strings.Count(log, "breaker changed state"); n != 3 {
		t.Fatalf("%d transitions logged, want 3:\n%s", n, log)
	}
	if n := strings.Count(log, "level=WARN"); n != 2 || !strings.Contains(log, "level=INFO") {
		t.Fatalf("want the openings at WARN and the half-opening at INFO:\n%s", log)
	}
}

// TestLog_zeroValueLogsNothing: without a logger, nothing is written and
// nothing fails.
func TestLog_zeroValueLogsNothing(t *testing.T) {
	var g Log
	g.BreakerChange("redis", breaker.Closed, breaker.Open)
	g.FailedOpen(context.Background(), "l2_get", "redis_error", errDown)
	g.CorruptEntry(context.Background())
	g.DecryptFailed(context.Background(), "r")
	g.LostLease(context.Background())
	g.Panicked(context.Background(), "boom", nil)
}
