package httpx

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
)

// entryKey is the key under which the cache keeps the response to req,
// given base, what Options.CacheKey returned, and vary, the headers the
// resource is known to vary on (see [varies]). It is base, length-prefixed,
// followed by a digest of the values of the vary headers and, when creds
// is set (Options.CacheCredentials), of the credential headers. Two
// requests share an entry only if they agree on all of those; a header
// that is absent never matches one that is present, even empty (RFC 9111
// section 4.1). The digest keeps credentials out of the key itself.
func entryKey(req *http.Request, base string, vary []string, creds bool) string {
	key := strconv.Itoa(len(base)) + ":" + base
	var names []string
	if creds && hasCredentials(req.Header) {
		names = append(names, credentialHeaders[:]...)
	}
	names = append(names, vary...)
	if len(names) == 0 {
		return key
	}
	h := sha256.New()
	for _, name := range names {
		h.Write([]byte(strconv.Quote(name)))
		values := req.Header.Values(name)
		if len(values) == 0 {
			h.Write([]byte("-")) // absent: no quoted string can read like this
			continue
		}
		// Field lines combine as one value, as RFC 9111 section 4.1 lets
		// a cache compare them.
		h.Write([]byte(strconv.Quote(strings.Join(values, ", "))))
	}
	return key + " " + hex.EncodeToString(h.Sum(nil))
}

// targetURI returns the target URI of a client request (RFC 9110 section
// 7.1): its URL, whose authority is Request.Host when that is set, as the
// Host header net/http sends then says.
func targetURI(req *http.Request) string {
	if req.Host == "" || req.Host == req.URL.Host {
		return req.URL.String()
	}
	u := *req.URL
	u.Host = req.Host
	return u.String()
}

// union returns the names in a or b, sorted and without repeats.
func union(a, b []string) []string {
	all := slices.Concat(a, b)
	slices.Sort(all)
	return slices.Compact(all)
}

// varies remembers, for each base key, the request headers its responses
// were last seen to vary on: what the key of the next request for it must
// cover. It is bounded and its entries expire, like the cache itself. A
// response that varies on a header the key did not cover is kept under
// the key that covers it; the headers are remembered so that the next
// request's key covers them.
type varies struct {
	m   *rcache.Memory[[]string]
	ttl time.Duration
}

func newVaries(o Options) *varies {
	return &varies{m: rcache.NewMemory[[]string](rcache.MemoryOptions{MaxEntries: o.CacheMaxEntries}), ttl: o.CacheTTL}
}

// of returns the headers base's responses vary on, as far as known.
func (v *varies) of(base string) []string {
	if h, f := v.m.Find(base); f == cache.Fresh {
		return h.Value()
	}
	return nil
}

// learn records that a response for base varies on h's Vary headers,
// adding them to those already known. The remembered list only grows
// until it expires, so that responses that disagree do not make it
// change back and forth.
func (v *varies) learn(base string, h http.Header) {
	names, star := varyNames(h)
	if star || len(names) == 0 {
		return
	}
	known := v.of(base)
	if covers(known, names) {
		return
	}
	all := union(known, names)
	now := time.Now() // the memory's own clock
	v.m.Set(base, rcache.Entry[[]string]{Value: all, Written: now, Expires: now.Add(v.ttl), StaleUntil: now.Add(v.ttl)})
}
