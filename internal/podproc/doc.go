// Package podproc runs pods as OS processes for the tests that need more
// than one process: a parent (a test, or the stampede harness) starts
// children of its own binary, each a pod, and talks to them in lines.
//
// The protocol, the same for every user:
//
//   - A pod is the parent's own executable re-run; by default a test
//     binary with -test.run=^$, so that it runs no test. [Spec.Env] names
//     its role and carries its configuration (see [JSONEnv]); the child's
//     TestMain (or main) looks the variable up with [os.LookupEnv] and, if
//     set, runs the pod instead of the tests.
//   - The parent writes commands to the pod's stdin, one line each
//     ([Proc.Send], [Proc.SendJSON]); a pod whose stdin closes is to exit.
//   - The pod writes its replies and events to stdout, one line each (JSON
//     lines from many goroutines: [Writer]); the parent reads them with
//     [Proc.Expect] or [Spec.OnLine]. Readiness is
//     a line too: the parent waits for it, never for a time.
//   - Faults are signals: [Proc.Kill] (SIGKILL, and wait until reaped),
//     [Proc.Stop] and [Proc.Cont] (SIGSTOP, SIGCONT; Unix only).
//   - The pod's stderr is kept (its last 32 KiB, [Proc.Stderr]) so that a
//     failure can say why a pod died; [Start] logs it when the test fails.
//
// On Linux a pod is SIGKILLed by the kernel if its parent dies without
// cleaning up (Pdeathsig), so no pod outlives a crashed test. [Start]
// registers a cleanup that stops the pod; [Proc.Close] does the same for
// a parent that is not a test.
//
// A [Proc] is safe for concurrent use.
package podproc
