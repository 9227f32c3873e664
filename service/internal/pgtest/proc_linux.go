//go:build linux

package pgtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts the server in its own process group (so that the
// terminal's SIGINT does not reach it) and asks the kernel to SIGKILL it if
// the test binary dies without running its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killTree kills the postmaster pid and its children with SIGKILL, as a
// crash would. Each postgres backend calls setsid, so killing the process
// group is not enough: the postmaster is stopped first (so it forks no
// more), its children are found in /proc and killed, then the postmaster.
// It returns once the children have exited (the caller reaps the
// postmaster), or after five seconds.
func killTree(pid int) {
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	children := childrenOf(pid)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range children {
		for alive(c) && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _ := stat(c); ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	_, state := stat(pid)
	return state != 0 && state != 'Z' && state != 'X'
}

// stat returns the parent pid and state of pid from /proc/pid/stat (0, 0
// when it is gone).
func stat(pid int) (ppid int, state byte) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0
	}
	fields := bytes.Fields(b[i+2:])
	if len(fields) < 2 || len(fields[0]) == 0 {
		return 0, 0
	}
	ppid, _ = strconv.Atoi(string(fields[1]))
	return ppid, fields[0][0]
}

// removeSharedMemory removes the System V shared memory segment that the
// postmaster recorded on line 7 of dataDir/postmaster.pid ("key shmid").
// A killed server leaves it behind (56 bytes per server); a server that
// shuts down, or restarts on the same data directory, removes it itself.
func removeSharedMemory(dataDir string) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return
	}
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) < 7 {
		return
	}
	fields := bytes.Fields(lines[6])
	if len(fields) != 2 {
		return
	}
	id, err := strconv.Atoi(string(fields[1]))
	if err != nil || id < 0 {
		return
	}
	_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
}
