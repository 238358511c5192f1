package resilience

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/redistest"
)

// syncBuffer is a bytes.Buffer that a logger may write from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogger_failOpenEpisodeLoggedOnce: with Redis down, every call fails
// open and the log says so once, with the pipeline's name and the error,
// and without the keys; the breaker's transition is logged.
func TestLogger_failOpenEpisodeLoggedOnce(t *testing.T) {
	srv := redistest.Start(t)
	var out syncBuffer
	p := build(t, New[string]("logged").Cache(time.Minute).Redis(srv.Client()).
		RedisOptions(RedisOptions{Breaker: breaker.Settings{Failures: 5}}).
		Logger(slog.New(slog.NewTextHandler(&out, nil))))
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		key := "secret-key-" + string(rune('a'+i%26))
		if _, err := p.Get(context.Background(), key, func(context.Context, string) (string, error) { return "v", nil }); err != nil {
			t.Fatal(err)
		}
	}
	log := out.String()
	if n := strings.Count(log, "calls go on without it"); n != 1 {
		t.Fatalf("fail-open logged %d times, want once:\n%s", n, log)
	}
	if !strings.Contains(log, "pipeline=logged") || !strings.Contains(log, "error=") {
		t.Fatalf("log lacks the pipeline or Redis's error:\n%s", log)
	}
	if strings.Contains(log, "secret-key") {
		t.Fatalf("log names a key:\n%s", log)
	}
	if !strings.Contains(log, "breaker changed state") || !strings.Contains(log, "to=open") {
		t.Fatalf("the Redis breaker's opening is not logged:\n%s", log)
	}
}
