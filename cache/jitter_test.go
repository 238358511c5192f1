package cache

import (
	"testing"
	"time"
)

func TestJitter_bounds(t *testing.T) {
	for range 1000 {
		d := Jitter(time.Second, 0.2)
		if d < 800*time.Millisecond || d > time.Second {
			t.Fatalf("Jitter = %v, outside [800ms, 1s]", d)
		}
	}
	if Jitter(time.Second, 0) != time.Second || Jitter(time.Second, 2) != time.Second {
		t.Fatal("out-of-range fraction should leave ttl alone")
	}
}
