package servicebench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Process is a server the benchmark started: ratelimitd or
// envoyproxy/ratelimit, bound to loopback. Close stops it.
type Process struct {
	// Name says which server it is, for messages.
	Name string
	// GRPCAddr is its gRPC listener (127.0.0.1:port).
	GRPCAddr string
	// HTTPAddr is its HTTP listener, if it has one.
	HTTPAddr string
	// PprofAddr is its net/http/pprof listener, if it was started with one.
	PprofAddr string
	// RulesFile is the rules file ratelimitd was started with (it reads it
	// again every second: a change is applied); "" for
	// envoyproxy/ratelimit.
	RulesFile string

	cmd  *exec.Cmd
	dir  string // removed on Close, if set
	log  *os.File
	done chan struct{}
	err  error // the process's exit, valid once done is closed
	once sync.Once
}

// start runs bin with args and env (added to this process's environment)
// and reaps it in the background. The server's stdout and stderr go to a
// file of its own, as a container runtime's log file would take them: what
// it writes costs the server, never the load generator (a pipe would make
// this process read every line).
func start(name, bin string, args, env []string, dir string) (*Process, error) {
	log, err := os.CreateTemp("", "sluice-bench-log-")
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	p := &Process{Name: name, dir: dir, log: log, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	// The server dies with the harness if it is interrupted.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.removeFiles()
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// PID is the server's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// CPU returns the CPU time (user + system, every thread) the server has used
// so far, from /proc/PID/stat.
func (p *Process) CPU() (time.Duration, error) { return ProcessCPU(p.PID()) }

// outputTail is how much of its log Output returns.
const outputTail = 32 << 10

// Output returns the end of what the server wrote to stdout and stderr
// (its last 32 KiB).
func (p *Process) Output() string {
	st, err := p.log.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-outputTail, 0)
	b := make([]byte, st.Size()-off)
	n, _ := p.log.ReadAt(b, off)
	return string(bytes.TrimSpace(b[:n]))
}

// LogSize is the size of what the server has written to stdout and stderr.
func (p *Process) LogSize() int64 {
	st, err := p.log.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

func (p *Process) removeFiles() {
	p.log.Close()
	os.Remove(p.log.Name())
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

// Exited reports whether the server has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Close stops the server: SIGTERM, then SIGKILL after 5 seconds; it waits
// for the process and removes its directory.
func (p *Process) Close() error {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		p.removeFiles()
	})
	return nil
}

// waitReady calls probe until it succeeds, the process exits or timeout
// passes; on failure the process is stopped and the error carries its
// output.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last = probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			p.Close()
			return fmt.Errorf("%s exited before it was ready (%v): %v\n%s", p.Name, p.err, last, p.Output())
		case <-ctx.Done():
			p.Close()
			return fmt.Errorf("%s not ready within %s: %v\n%s", p.Name, timeout, last, p.Output())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 (held open
// together while they are chosen, then released for the server to bind).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
