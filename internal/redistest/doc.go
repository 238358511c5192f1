// Package redistest starts private redis-server processes for tests: one
// standalone server ([Start], [New]) or a small Redis Cluster ([StartCluster],
// [NewCluster]), each on free loopback ports, in its own temporary directory,
// with persistence off.
//
// Tests never share the machine's Redis. Every process a helper starts is
// killed by its cleanup (and, on Linux, by the kernel if the test binary
// dies first), and each process's log is kept in the temporary directory so
// that a failure message can quote its tail.
//
// The helpers need redis-server (and, for a cluster, redis-cli) on PATH; the
// repository's test script, ./scripts/test, installs them.
package redistest
