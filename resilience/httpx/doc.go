// Package httpx makes outgoing HTTP calls resilient without changing how
// they are made: a [Transport] is an [http.RoundTripper], so callers keep
// using an [*http.Client] ([NewClient] wraps one).
//
// Each request goes through these stages, outermost first:
//
//   - an optional cache (Options.CacheTTL), for GET and HEAD by default,
//     keyed by method and URL. It caches 2xx responses only, as their status,
//     header and body bytes, and gives every caller a fresh [*http.Response]
//     with its own body reader. Concurrent misses for one key share one
//     upstream exchange. It is built on [resilience.Pipeline] (Cache and
//     SingleFlight).
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
//     Transport errors, attempt timeouts and 5xx responses count as
//     failures; 4xx responses (429 included) do not: they say the request
//     was wrong, not that the host is sick. Every attempt is counted, so an
//     open breaker also stops the retries at once.
//   - a timeout per attempt (Options.AttemptTimeout), which also bounds
//     reading the body of the response returned, as [http.Client.Timeout]
//     does.
//
// When the breaker refuses a request, or the last attempt still ended in a
// transport error, a 5xx or a 429, Options.Fallback (if set) answers
// instead. Fallback responses are never cached.
//
// Retries, the breaker and the timeouts are built directly on package
// [breaker] and github.com/cenkalti/backoff/v4 rather than on the
// pipeline's retry stage, because HTTP needs things that stage does not
// know: Retry-After, draining discarded bodies, and replaying request
// bodies.
//
// Non-idempotent requests (POST, PATCH) get the breaker, the timeout and the
// fallback, but are neither retried nor cached unless Options.Idempotent or
// Options.CacheKey say otherwise.
package httpx
