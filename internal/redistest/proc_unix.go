//go:build unix && !linux

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr puts the server in its own process group so that it and any
// child it forks can be killed together.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup sends SIGKILL to the process group led by pid.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// terminate asks the process to shut down gracefully.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
