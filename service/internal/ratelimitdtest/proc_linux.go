package ratelimitdtest

import "syscall"

// sysProcAttr makes the child die with the test binary (PR_SET_PDEATHSIG),
// so no ratelimitd outlives a test killed by go test's -timeout.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
