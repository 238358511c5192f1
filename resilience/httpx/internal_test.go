package httpx

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"99999999999999999", time.Duration(1<<63 - 1), true},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{now.Add(time.Minute).Format(time.RFC850), time.Minute, true},
		{now.Add(time.Minute).Format(time.ANSIC), time.Minute, true},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.value != "" {
			h.Set("Retry-After", tt.value)
		}
		got, ok := retryAfter(h, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.ok)
		}
	}
}

func TestNoStore(t *testing.T) {
	tests := []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{"max-age=60"}, false},
		{[]string{"no-store"}, true},
		{[]string{"public, No-Store"}, true},
		{[]string{"max-age=60", "no-store"}, true},
	}
	for _, tt := range tests {
		h := http.Header{"Cache-Control": tt.values}
		if got := noStore(h); got != tt.want {
			t.Errorf("noStore(%q) = %v, want %v", tt.values, got, tt.want)
		}
	}
}
