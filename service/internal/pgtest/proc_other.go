//go:build unix && !linux

package pgtest

import "syscall"

// sysProcAttr puts the server in its own process group.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killTree kills the postmaster pid with SIGKILL; its backends exit when
// they notice the postmaster is gone.
func killTree(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// removeSharedMemory does nothing outside Linux: a killed server's System V
// segment (a few bytes) is left for the next start on that data directory.
func removeSharedMemory(string) {}
