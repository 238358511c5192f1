package redistest

import "syscall"

// sysProcAttr asks the kernel to kill the server if the test binary dies
// without running its cleanups, so that no redis-server outlives a crash.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
