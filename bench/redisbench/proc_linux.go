package redisbench

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the server if this process dies without closing it
// (an interrupted report or benchmark).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
