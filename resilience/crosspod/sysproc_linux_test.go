package crosspod_test

import "syscall"

// sysProcAttr asks the kernel to kill a pod if the test binary dies
// without running its cleanups, so that no pod outlives a crashed test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
