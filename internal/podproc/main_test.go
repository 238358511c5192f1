package podproc_test

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// roleEnv names the role of a child of this test binary.
const roleEnv = "PODPROC_TEST_ROLE"

// TestMain runs the tests, or, when a test started this binary as a pod
// (roleEnv set), the pod's role.
func TestMain(m *testing.M) {
	if role, ok := os.LookupEnv(roleEnv); ok {
		os.Exit(child(role))
	}
	goleak.VerifyTestMain(m)
}

// child runs a role: echo prints "ready" and "echo <line>" for each line
// of stdin until it closes; die writes "boom" to stderr and exits 3; hang
// prints "ready" and waits for SIGUSR1, which never comes.
func child(role string) int {
	switch role {
	case "echo":
		fmt.Println("ready")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println("echo", sc.Text())
		}
		return 0
	case "die":
		fmt.Fprintln(os.Stderr, "boom: the pod could not start")
		return 3
	case "hang":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		fmt.Println("ready")
		<-ch
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}
