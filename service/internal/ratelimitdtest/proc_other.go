//go:build !linux

package ratelimitdtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
