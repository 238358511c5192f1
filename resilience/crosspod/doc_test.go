// Package crosspod_test checks the distributed lock's promises across pods
// that are separate OS processes sharing one real Redis (single node,
// Sentinel or Cluster), under real faults: a holder SIGKILLed or cut off
// from Redis mid-load, Redis restarted without persistence, flushed or
// evicting, its breaker open, foreign data at the lock's keys, a primary
// failed over.
//
// The test binary is its own pod (internal/podproc starts, signals and
// stops it): TestMain runs it as one when podEnv is set. Each pod builds one pipeline and speaks with the parent in JSON
// lines: commands on its stdin (get, finish, invalidate, exit), events on
// its stdout (ready, load, result, script, breaker, done). A load's value
// names its key, its pod, a per-pod sequence and its start time, so the
// parent can tell whose load each caller got and which load is newest.
//
// The write, key-loss, link-fault, takeover and failover tests also
// check their histories (each Get with the value it returned, each Set
// and Invalidate, with when each call began and returned) for
// linearizability with porcupine, against the model of docs/model.md
// (history_test.go).
//
// Figures worth quoting are logged with the prefix FIGURES:
//
//	go test -race -count=1 -v ./resilience/crosspod/ | grep FIGURES
package crosspod_test
