//go:build !linux

package servicebench

import (
	"errors"
	"time"
)

// ProcessCPU needs Linux's /proc; elsewhere it returns an error.
func ProcessCPU(pid int) (time.Duration, error) {
	return 0, errors.New("per-process CPU time needs Linux's /proc")
}

// SelfCPU needs Linux in this package; elsewhere it returns an error.
func SelfCPU() (time.Duration, error) {
	return 0, errors.New("the load generator's CPU time is read on Linux only")
}
