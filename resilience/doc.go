// Package resilience composes the toolkit's stages into one pipeline per call
// site: an in-process cache, local single-flight, a Redis cache, a
// distributed lock, the loader behind its breaker, retry and timeout, and
// fallbacks (a stale copy, then a default).
//
// A [Builder] assembles a [Pipeline] once, at start-up:
//
//	users, err := resilience.New[User]("users").
//		Cache(5 * time.Minute).
//		Breaker(breaker.Settings{}).
//		Timeout(2 * time.Second).
//		Stale(time.Hour).
//		Build()
//
// and each call then runs through the stages that were configured:
//
//	u, err := users.Get(ctx, "42", loadUser)
//
// For one key, at most one loader call runs per process at a time; with a
// distributed lock ([Builder.Redis] and [Builder.Lock]), at most one across
// all processes while Redis is healthy. When Redis fails, calls fail open:
// they go on without it, and the result says so. When the loader fails, the
// fallback chain answers. [Result] tells each caller where its value came
// from.
//
// With no Redis configured the pipeline runs in one process (the embedded
// default): memory cache, in-process lock.
//
// [Builder.Backend] puts another coordination service in Redis's place (a
// PostgreSQL database, a directory shared by the processes of a host):
// the pipeline opens its [backend.Shared] view, the shared cache, lock and
// announcements of the pipeline's namespace, and keeps the same promises
// over it, failing open when it fails.
//
// [Pipeline.Set] and [Pipeline.Invalidate] write a key through: in Redis,
// fenced above every load in flight, and announced to every process, which
// drops its in-process copy. [Pipeline.Peek] reads without loading;
// [Pipeline.Refresh] reloads now; a loader can set its value's TTL with
// [SetTTL].
//
// Values are shared, not copied: every caller of a key gets the value the
// cache holds (an L1 hit returns it without a copy or an allocation), so a
// caller must not change a map, slice or pointee in it. [Builder.Clone]
// makes every value handed out a copy instead.
//
// # Exported names
//
// Users of the pipeline need [New], [Builder] and its methods, the
// settings it takes ([LockSettings], [RetrySettings], [RedisOptions]) and
// the Default* constants they name, [Pipeline] and its methods, the
// loaders' types ([LoadFunc], [LoadManyFunc], [DoFunc]) with [SetTTL],
// [MinLoaderTTL] and [Permanent], what calls return ([Result], [Source]
// and its values, [Stats], [Health], [KeyErrors]), and the errors they
// match ([ErrNotFound], [ErrTimeout], [ErrClosed], [ErrEmptyKey],
// [ErrNilContext], [ErrNilLoader], [ErrWrongCall], [PanicError],
// [ConfigError], [CheckError]).
//
// Users of a coordination backend other than Redis need [Builder.Backend]
// and [BackendOptions]; its implementers need package
// github.com/herdguard/herdguard/backend alone (the contract, Backend and
// Shared, with the lease and the errors it hands out).
package resilience
