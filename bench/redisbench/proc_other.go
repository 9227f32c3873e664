//go:build !linux

package redisbench

import "os/exec"

func setDeathSignal(*exec.Cmd) {}
