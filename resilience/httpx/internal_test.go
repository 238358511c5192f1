package httpx

import (
	"maps"
	"net/http"
	"slices"
	"strings"
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

func TestParseDirectives(t *testing.T) {
	tests := []struct {
		values []string
		want   directives
	}{
		{nil, directives{}},
		{[]string{"max-age=60"}, directives{"max-age": "60"}},
		{[]string{"public, No-Store"}, directives{"public": "", "no-store": ""}},
		{[]string{"max-age=60", "no-store"}, directives{"max-age": "60", "no-store": ""}},
		{[]string{"MAX-AGE = 5 , max-age=60"}, directives{"max-age": "5"}}, // the first counts
		{[]string{`private="Set-Cookie, X-Token", max-age=9`}, directives{"private": "Set-Cookie, X-Token", "max-age": "9"}},
		{[]string{`no-cache="a\"b", s-maxage="7"`}, directives{"no-cache": `a"b`, "s-maxage": "7"}},
		{[]string{",, ,"}, directives{}},
	}
	for _, tt := range tests {
		if got := parseDirectives(tt.values); !maps.Equal(got, tt.want) {
			t.Errorf("parseDirectives(%q) = %v, want %v", tt.values, got, tt.want)
		}
	}
}

func TestDeltaSeconds(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"60", time.Minute, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{" 5", 0, false},
		{"99999999999999999999999", maxDelta * time.Second, true},
	}
	for _, tt := range tests {
		if got, ok := deltaSeconds(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("deltaSeconds(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestVaryNames(t *testing.T) {
	h := http.Header{"Vary": {"accept-language, Accept-Encoding", "X-User,accept-language"}}
	names, star := varyNames(h)
	if want := []string{"Accept-Encoding", "Accept-Language", "X-User"}; !slices.Equal(names, want) || star {
		t.Errorf("varyNames = %q, %v; want %q, false", names, star, want)
	}
	if _, star := varyNames(http.Header{"Vary": {"Accept, *"}}); !star {
		t.Error("varyNames missed the *")
	}
}

func TestEntryKey(t *testing.T) {
	req := func(h http.Header) *http.Request { return &http.Request{Header: h} }
	const base = "GET http://h/p"
	vary := []string{"Accept-Language"}
	keys := map[string]string{
		"no vary":       entryKey(req(nil), base, nil, false),
		"absent":        entryKey(req(nil), base, vary, false),
		"empty":         entryKey(req(http.Header{"Accept-Language": {""}}), base, vary, false),
		"en":            entryKey(req(http.Header{"Accept-Language": {"en"}}), base, vary, false),
		"en, fr":        entryKey(req(http.Header{"Accept-Language": {"en, fr"}}), base, vary, false),
		"alice":         entryKey(req(http.Header{"Cookie": {"user=alice"}}), base, nil, true),
		"bob":           entryKey(req(http.Header{"Cookie": {"user=bob"}}), base, nil, true),
		"token":         entryKey(req(http.Header{"Authorization": {"Bearer secret"}}), base, nil, true),
		"other base":    entryKey(req(nil), base+"x", nil, false),
		"creds ignored": entryKey(req(http.Header{"Cookie": {"user=alice"}}), base, nil, false),
	}
	seen := map[string]string{}
	for name, k := range keys {
		if other, dup := seen[k]; dup && !(name == "creds ignored" || other == "creds ignored") {
			t.Errorf("%s and %s share the key %q", name, other, k)
		}
		seen[k] = name
		if strings.Contains(k, "alice") || strings.Contains(k, "secret") {
			t.Errorf("key %q of %s shows a credential", k, name)
		}
	}
	if two := entryKey(req(http.Header{"Accept-Language": {"en", "fr"}}), base, vary, false); two != keys["en, fr"] {
		t.Errorf("two field lines en and fr make key %q, want that of one line \"en, fr\", %q", two, keys["en, fr"])
	}
	if keys["creds ignored"] != keys["no vary"] {
		t.Errorf("without CacheCredentials, the key is %q, want the plain %q", keys["creds ignored"], keys["no vary"])
	}
}

// TestJudge_vary: a response is reused only if the key covered every
// header its Vary names.
func TestJudge_vary(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		vary    string
		covered []string
		kept    bool
	}{
		{"", nil, true},
		{"X-User", nil, false},
		{"x-user", []string{"X-User"}, true},
		{"X-User, Accept", []string{"X-User"}, false},
		{"X-User", []string{"Accept", "X-User"}, true},
		{"*", []string{"X-User"}, false},
	}
	for _, tt := range tests {
		resp := &http.Response{StatusCode: 200, Header: http.Header{}}
		if tt.vary != "" {
			resp.Header.Set("Vary", tt.vary)
		}
		v := judge(resp, tt.covered, false, now, time.Minute)
		if kept := v.ttl > 0; kept != tt.kept || v.shared != tt.kept {
			t.Errorf("judge(Vary %q, covered %q) = %+v, want kept and shared %v", tt.vary, tt.covered, v, tt.kept)
		}
	}
}
