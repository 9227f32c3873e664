//go:build linux

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr puts the server in its own process group (so that it and any
// child it forks can be killed together and it does not receive the
// terminal's SIGINT) and asks the kernel to SIGKILL it if the test binary
// dies without running its cleanups (for example on a -timeout panic).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// terminate asks the process to shut down gracefully.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
