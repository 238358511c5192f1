package httpx

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
)

// This file holds the rules of RFC 9111 that the cache follows as a
// shared cache: which requests may use it, which responses it may reuse
// and keep, and for how long. The cache never revalidates (it sends no
// conditional requests), so a response that could only be reused after
// validation is treated as one that cannot be reused at all.

// usesCache reports whether req may be answered from the cache and its
// response kept there. A request with credentials (Authorization or
// Cookie) may not, unless Options.CacheCredentials; nor may one whose
// Cache-Control says no-store, no-cache or max-age=0, or has a max-age or
// min-fresh that is not a delta-seconds, or that has only "Pragma:
// no-cache" (RFC 9111 sections 5.2.1 and 5.4).
func (t *Transport) usesCache(req *http.Request) bool {
	if !t.o.CacheCredentials && hasCredentials(req.Header) {
		return false
	}
	cc := parseDirectives(req.Header.Values("Cache-Control"))
	if cc.has("no-store") || cc.has("no-cache") {
		return false
	}
	if v, ok := cc["max-age"]; ok {
		if age, valid := deltaSeconds(v); !valid || age == 0 {
			return false
		}
	}
	if v, ok := cc["min-fresh"]; ok {
		if _, valid := deltaSeconds(v); !valid {
			return false
		}
	}
	if len(cc) == 0 {
		for _, p := range req.Header.Values("Pragma") {
			if parseDirectives([]string{p}).has("no-cache") {
				return false
			}
		}
	}
	return true
}

// accepts reports whether req, which may use the cache, accepts a stored
// response of age age that stays fresh for left more: not if its
// Cache-Control max-age is less than age (RFC 9111 section 5.2.1.1), nor
// if its min-fresh is more than left (section 5.2.1.3). A request that
// does not accept the stored response goes to the upstream, whose
// response then takes the stored one's place.
func accepts(req *http.Request, age, left time.Duration) bool {
	cc := parseDirectives(req.Header.Values("Cache-Control"))
	if maxAge, ok := deltaSeconds(cc["max-age"]); ok && age > maxAge {
		return false
	}
	if minFresh, ok := deltaSeconds(cc["min-fresh"]); ok && left < minFresh {
		return false
	}
	return true
}

// credentialHeaders are the request headers that tie a response to one
// user.
var credentialHeaders = [...]string{"Authorization", "Cookie"}

func hasCredentials(h http.Header) bool {
	for _, name := range credentialHeaders {
		if len(h.Values(name)) > 0 {
			return true
		}
	}
	return false
}

// verdict is what the cache rules make of one response.
type verdict struct {
	// ttl, when positive, is how long the cache keeps the response.
	ttl time.Duration
	// shared says the response may also answer the other callers whose
	// requests shared its exchange. A response that is not shared reaches
	// only the caller whose request was sent; the others send their own.
	shared bool
}

// judge applies the response rules to resp, received at now for a
// request keyed on the values of the headers in covered (sorted,
// canonical), with maxTTL the longest the cache keeps anything. authorized
// says the request carried an Authorization header.
//
// A response is reused (shared, and kept if its status allows) only if
// nothing ties it to the request that fetched it: no Cache-Control
// private, no-store or no-cache (RFC 9111 sections 5.2.2.4, 5.2.2.5 and
// 5.2.2.7; their field-name forms are treated as the plain ones), no
// Set-Cookie, and no Vary naming a header the key does not cover, or "*"
// (section 4.1). A response to a request with Authorization must also say
// a shared cache may reuse it: public, s-maxage or must-revalidate
// (section 3.5). And it must be fresh: s-maxage, else max-age, else
// Expires minus Date, less the Age header (section 4.2).
//
// Of the reusable responses, the cache keeps (see [keepsStatus]) those
// whose status RFC 9110 section 15.1 makes heuristically cacheable, for
// maxTTL when they name no lifetime (the cache's heuristic, section
// 4.2.2), and other 2xx ones only with an explicit lifetime or "public".
// An explicit lifetime shorter than maxTTL bounds the time kept.
func judge(resp *http.Response, covered []string, authorized bool, now time.Time, maxTTL time.Duration) verdict {
	h := resp.Header
	cc := parseDirectives(h.Values("Cache-Control"))
	if cc.has("private") || cc.has("no-store") || cc.has("no-cache") || len(h.Values("Set-Cookie")) > 0 {
		return verdict{}
	}
	if authorized && !cc.has("public") && !cc.has("s-maxage") && !cc.has("must-revalidate") {
		return verdict{}
	}
	names, star := varyNames(h)
	if star || !covers(covered, names) {
		return verdict{}
	}
	left, explicit := freshness(h, cc, now)
	if explicit && left <= 0 {
		return verdict{} // stale on arrival: reusable only after validation
	}
	v := verdict{shared: true}
	if !keepsStatus(resp.StatusCode, explicit || cc.has("public")) {
		return v
	}
	v.ttl = maxTTL
	if explicit {
		v.ttl = min(maxTTL, left)
	}
	return v
}

// keepsStatus reports whether a reusable response of status code may be
// kept: one of the heuristically cacheable statuses of RFC 9110 section
// 15.1 (200, 203, 204, 300, 301, 308, 404, 405, 410, 414 and 501) with or
// without an explicit lifetime, and the temporary redirects (302, 303 and
// 307) and any other 2xx with one (or "public"). 206 is never kept,
// although heuristically cacheable: the cache neither stores nor combines
// ranges (RFC 9111 section 3.3 lets it not), and DefaultCacheKey leaves
// out requests with Range. Other statuses are not kept even with a
// lifetime, which RFC 9111 section 3 allows but does not require: 429 and
// 5xx but 501 are failures, retried and handed to Fallback, 304 answers a
// validation the cache does not make, and the other 4xx describe a
// passing state of the request.
func keepsStatus(code int, explicit bool) bool {
	switch code {
	case http.StatusPartialContent:
		return false
	case http.StatusOK, http.StatusNonAuthoritativeInfo, http.StatusNoContent,
		http.StatusMultipleChoices, http.StatusMovedPermanently, http.StatusPermanentRedirect,
		http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusGone, http.StatusRequestURITooLong,
		http.StatusNotImplemented:
		return true
	case http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect:
		return explicit
	}
	return explicit && code/100 == 2
}

// freshness returns how much longer a response received at now stays
// fresh, and whether its header says so explicitly. For a shared cache
// s-maxage wins over max-age, which wins over Expires (RFC 9111 section
// 4.2.1). An invalid lifetime, or an Expires that is not a valid date,
// means already stale. The age taken off is the Age header's: the cache
// does not estimate an age from Date, so a skewed upstream clock cannot
// make a response look older or younger than the upstream says.
func freshness(h http.Header, cc directives, now time.Time) (left time.Duration, explicit bool) {
	var life time.Duration
	switch {
	case cc.has("s-maxage"):
		life, _ = deltaSeconds(cc["s-maxage"])
	case cc.has("max-age"):
		life, _ = deltaSeconds(cc["max-age"])
	case len(h.Values("Expires")) > 0:
		exp, err := http.ParseTime(h.Get("Expires"))
		if err != nil {
			return 0, true
		}
		date, err := http.ParseTime(h.Get("Date"))
		if err != nil {
			date = now
		}
		life = exp.Sub(date)
	default:
		return 0, false
	}
	age, _ := deltaSeconds(h.Get("Age"))
	return life - age, true
}

// maxDelta is what a delta-seconds too large to represent counts as (RFC
// 9111 section 1.2.2).
const maxDelta = 1 << 31

// deltaSeconds parses an RFC 9111 delta-seconds: digits only. ok is false
// for anything else, which the rules above read as "stale".
func deltaSeconds(s string) (d time.Duration, ok bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < math.MaxInt64/10 {
			n = n*10 + int64(c-'0')
		}
	}
	return time.Duration(min(n, maxDelta)) * time.Second, true
}

// directives are the directives of Cache-Control header values: lower-case
// names mapped to their arguments, unquoted ("" for none). Only a
// directive's first occurrence counts.
type directives map[string]string

func (d directives) has(name string) bool {
	_, ok := d[name]
	return ok
}

func parseDirectives(values []string) directives {
	if len(values) == 0 {
		return nil // most requests: reading a nil map is fine
	}
	d := directives{}
	for _, v := range values {
		for v != "" { // each turn consumes at least one byte of v
			var item string
			item, v = nextItem(v)
			name, arg, _ := strings.Cut(item, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" || d.has(name) {
				continue
			}
			d[name] = unquote(strings.TrimSpace(arg))
		}
	}
	return d
}

// nextItem splits s at its first comma outside a quoted string.
func nextItem(s string) (item, rest string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case '\\':
			if quoted {
				i++
			}
		case ',':
			if !quoted {
				return s[:i], s[i+1:]
			}
		}
	}
	return s, ""
}

// unquote returns the content of a quoted-string, or s if it is a token.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	s = s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// varyNames returns the header names a response's Vary lists, canonical,
// sorted and without repeats; star is set when it lists "*".
func varyNames(h http.Header) (names []string, star bool) {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			switch f = strings.TrimSpace(f); f {
			case "":
			case "*":
				star = true
			default:
				names = append(names, http.CanonicalHeaderKey(f))
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), star
}

// covers reports whether every name in names is in covered.
func covers(covered, names []string) bool {
	for _, n := range names {
		if _, found := slices.BinarySearch(covered, n); !found {
			return false
		}
	}
	return true
}
