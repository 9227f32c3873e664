//go:build !unix

package redistest

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(int) {}

// terminate has no graceful variant here; Stop falls back to killing.
func terminate(p *os.Process) error { return p.Kill() }
