package rcache

import (
	"testing"
	"time"
)

func TestEntry_CapFresh(t *testing.T) {
	now := time.Now()
	limit := now.Add(time.Minute)
	cases := []struct {
		name                 string
		expires, staleUntil  time.Time
		wantExp, wantStaleTo time.Time
	}{
		{"within the limit: untouched", now.Add(time.Second), now.Add(time.Hour), now.Add(time.Second), now.Add(time.Hour)},
		{"past it, stale beyond: expiry capped", now.Add(time.Hour), now.Add(2 * time.Hour), limit, now.Add(2 * time.Hour)},
		{"past it, stale-until before the limit: both at it", now.Add(time.Hour), now.Add(time.Second), limit, limit},
	}
	for _, tc := range cases {
		e := Entry[int]{Expires: tc.expires, StaleUntil: tc.staleUntil}
		e.CapFresh(limit)
		if !e.Expires.Equal(tc.wantExp) || !e.StaleUntil.Equal(tc.wantStaleTo) {
			t.Errorf("%s: expires %v, stale until %v; want %v, %v", tc.name,
				e.Expires.Sub(now), e.StaleUntil.Sub(now), tc.wantExp.Sub(now), tc.wantStaleTo.Sub(now))
		}
	}
}
