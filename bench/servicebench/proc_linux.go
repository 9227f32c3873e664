package servicebench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of /proc/PID/stat's times: USER_HZ, 100 on every
// Linux architecture Go supports (sysconf(_SC_CLK_TCK) without cgo).
const clockTick = 10 * time.Millisecond

// ProcessCPU returns the CPU time (utime + stime: user and system, every
// thread) process pid has used, from /proc/PID/stat, to 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	return parseStat(string(b))
}

// parseStat reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line; the command name (field 2) is in parentheses and may hold spaces.
func parseStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command name in %q", s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the name, want 13 or more", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: utime %q stime %q: not integers", f[11], f[12])
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// SelfCPU returns the CPU time (user + system, every thread) this process,
// the load generator, has used: getrusage(RUSAGE_SELF), to the microsecond.
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
