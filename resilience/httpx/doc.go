// Package httpx makes outgoing HTTP calls resilient without changing how
// they are made: a [Transport] is an [http.RoundTripper], so callers keep
// using an [*http.Client] ([NewClient] wraps one).
//
// Each request goes through these stages, outermost first:
//
//   - an optional cache (Options.CacheTTL), for GET and HEAD by default,
//     keyed by method and target URI (the URL, with Request.Host as its
//     authority when set). It keeps the responses RFC 9111 lets a shared
//     cache keep (see "The cache" below), as their status, header and
//     body bytes, and gives every caller a fresh
//     [*http.Response] with its own body reader. Concurrent misses for one
//     key share one upstream exchange. It follows RFC 9111's rules for a
//     shared cache (see "The cache" below), and is built on
//     [resilience.Pipeline] (Cache and SingleFlight).
//   - retries, for idempotent requests only (GET, HEAD, OPTIONS, TRACE, PUT
//     and DELETE, as RFC 9110 section 9.2.2 defines them, and any request
//     carrying an Idempotency-Key header, as net/http does), on transport
//     errors, attempt timeouts, 5xx and 429 responses. Waits grow
//     exponentially with jitter, and a Retry-After header (seconds or an
//     HTTP-date) is honoured up to Options.MaxRetryAfter. A response that is
//     not returned is drained (up to 64 KiB) and closed before the next
//     attempt. A request body is replayed only through Request.GetBody: a
//     request with a body but no GetBody is sent once.
//   - a circuit breaker per host ([breaker.Breaker], created on first use).
//     Transport errors, attempt timeouts, 5xx and 429 responses count as
//     failures: a host that throttles is overloaded, and leaving it alone
//     helps it recover. Other 4xx responses do not count: they say the
//     request was wrong, not that the host is sick. Every attempt is
//     counted, so an open breaker also stops the retries at once.
//     [Transport.Breakers] (or [Breakers], given the client) reports the
//     state of each host's breaker.
//   - a timeout per attempt (Options.AttemptTimeout), which also bounds
//     reading the body of the response returned, as [http.Client.Timeout]
//     does.
//
// When the breaker refuses a request, or the last attempt still ended in a
// transport error, a 5xx or a 429, Options.Fallback (if set) answers
// instead. Fallback responses are never cached.
//
// The retries run through the same loop as the pipeline's Retry stage,
// and the same github.com/cenkalti/backoff/v4 schedule; what HTTP adds
// (Retry-After as the wait hint, draining discarded bodies, replaying
// request bodies) stays here. No wait runs past the request's deadline: a
// backoff or Retry-After that would end after it is not waited out, and
// the last response or error is returned at once. The breaker and the
// timeouts are built directly on package [breaker].
//
// Non-idempotent requests (POST, PATCH) get the breaker, the timeout and the
// fallback, but are neither retried nor cached unless Options.Idempotent or
// Options.CacheKey say otherwise.
//
// # The cache
//
// The cache serves many users, so it follows RFC 9111's rules for a shared
// cache:
//
//   - a response is stored and reused for the same target URI only (RFC
//     9111 section 4): two Hosts behind one address never share one.
//   - requests carrying Authorization or Cookie bypass it, unless
//     Options.CacheCredentials keys them by (a digest of) those headers;
//     so do requests whose Cache-Control says no-store, no-cache or
//     max-age=0 (or a max-age or min-fresh that is not a number), or that
//     send "Pragma: no-cache".
//   - a request's max-age and min-fresh are honoured (sections 5.2.1.1
//     and 5.2.1.3): a stored response older than max-age, or fresh for
//     less than min-fresh, is not served; the request goes upstream and
//     its response replaces the stored one.
//   - a response is reused, whether kept or handed to the other callers
//     that shared its exchange, only if nothing ties it to the request
//     that fetched it: no Cache-Control private, no-store or no-cache, no
//     Set-Cookie, and no Vary: *. With CacheCredentials, a response to a
//     request with Authorization must also say public, s-maxage or
//     must-revalidate (section 3.5); max-age alone is not enough. A
//     response that is not reused reaches only the caller whose request
//     was sent; the others send their own.
//   - Vary is respected (section 4.1): once a response names the request
//     headers it varies on, the key of that URL includes those headers'
//     values, and the response that revealed them is kept under that
//     variant key. It reaches only the caller whose request was sent.
//   - s-maxage (which wins, the cache being shared), else max-age, else
//     Expires minus Date, less the Age header, bound how long a response
//     is kept below CacheTTL; a response stale on arrival is not kept.
//     Without those, the heuristically cacheable statuses of RFC 9110
//     section 15.1 (200, 203, 204, 300, 301, 308, 404, 405, 410, 414 and
//     501) are kept for CacheTTL, the cache's heuristic lifetime (RFC 9111
//     section 4.2.2); they are kept with an explicit lifetime too, and
//     302, 303, 307 and other 2xx only with one (or "public"). 206 is
//     never kept: the cache does not store or combine ranges. Other
//     statuses are not kept (429 and other 5xx are failures). A kept 501 still goes to
//     Options.Fallback, as an uncached one does. A response served from
//     the cache carries an Age header. The cache never revalidates.
//
// A request that bypasses the cache, and a response the cache does not
// keep, go through the other stages as usual.
//
// # Exported names
//
// Users of the transport need [New], [NewClient], [Transport] and its
// methods, [Options] with the Default* constants it names, the policies
// they may reuse or wrap ([IsIdempotent], [DefaultCacheKey]), [Breakers]
// for health reports, and the errors they match ([ErrInvalidOptions],
// [ErrTimeout], [ErrFallback], [StatusError]).
package httpx
