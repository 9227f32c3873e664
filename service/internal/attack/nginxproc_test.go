//go:build linux

package attack

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireNginxEnv makes a missing nginx a failure (set by make test).
const requireNginxEnv = "SLUICE_REQUIRE_NGINX"

// nginxBinary returns the path of nginx: on PATH, or Debian's /usr/sbin/nginx
// (not on a user's PATH). Without one the test fails under
// SLUICE_REQUIRE_NGINX=1 and is skipped otherwise.
func nginxBinary(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"nginx", "/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(requireNginxEnv) == "1" {
		t.Fatalf("no nginx on PATH or in /usr/sbin (%s=1): run scripts/ensure-nginx.sh", requireNginxEnv)
	}
	t.Skipf("no nginx (scripts/ensure-nginx.sh installs it; %s=1 makes this a failure)", requireNginxEnv)
	return ""
}

// nginxProc is an nginx the test started: one process (master_process
// off, so no worker outlives it), everything it writes in its own
// directory, listening on one loopback port.
type nginxProc struct {
	addr string // host:port of the listen directive
	dir  string // its prefix: configuration, logs, temp paths, sockets
}

// startNginx runs nginx with the http block's contents body, in which
// {{listen}} stands for a free loopback address and {{dir}} for the
// process's directory (for unix sockets). The process is stopped by a
// cleanup.
func startNginx(t *testing.T, body string) *nginxProc {
	t.Helper()
	bin := nginxBinary(t)
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		addr := freeLoopback(t)
		n := &nginxProc{addr: addr, dir: dir}
		conf := filepath.Join(dir, "nginx.conf")
		require.NoError(t, os.WriteFile(conf, []byte(n.config(body)), 0o600))
		cmd := exec.Command(bin, "-p", dir+"/", "-c", conf, "-e", filepath.Join(dir, "error.log"), "-g", "daemon off;")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		err := waitListening(addr, exited, 10*time.Second)
		if err == nil {
			t.Cleanup(func() { stopNginx(t, cmd, exited) })
			return n
		}
		stopNginx(t, cmd, exited)
		logs := out.String() + n.errorLog()
		if strings.Contains(logs, "Address already in use") && attempt < 5 {
			continue // another process took the port between the pick and the bind
		}
		t.Fatalf("nginx did not start: %v\n%s", err, logs)
	}
}

// config is the whole configuration around body.
func (n *nginxProc) config(body string) string {
	body = strings.NewReplacer("{{listen}}", n.addr, "{{dir}}", n.dir).Replace(body)
	return fmt.Sprintf(`master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 512; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s
}
`, n.dir, body)
}

// errorLog returns nginx's error log.
func (n *nginxProc) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "error.log"))
	return string(b)
}

// stopNginx asks nginx to stop (SIGTERM) and kills its process group if it
// has not exited within 5 seconds.
func stopNginx(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		t.Errorf("nginx (pid %d) ignored SIGTERM for 5 s and was killed", cmd.Process.Pid)
	}
}

// freeLoopback returns a 127.0.0.1 address no listener holds right now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// waitListening waits until addr accepts a connection, the process exits,
// or within passes.
func waitListening(addr string, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("nginx exited")
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %s", addr, within)
		}
	}
}

// rawResponse is what nginx answered to a raw request.
type rawResponse struct {
	status int
	header http.Header
	body   string
}

// rawRequest is sendRaw, failing the test on an error.
func rawRequest(t *testing.T, addr, from, method, target string, extra []string, body string) rawResponse {
	t.Helper()
	r, err := sendRaw(addr, from, method, target, extra, body)
	require.NoError(t, err)
	return r
}

// sendRaw writes "METHOD target HTTP/1.1", a Host header, the header
// lines extra (each "Name: value") and body to addr over a new
// connection from the local address from ("" for any), byte for byte,
// and reads the answer.
func sendRaw(addr, from, method, target string, extra []string, body string) (rawResponse, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return rawResponse{}, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return rawResponse{}, err
	}
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: sluice.test\r\nConnection: close\r\n")
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		return rawResponse{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		return rawResponse{}, fmt.Errorf("%s %q: %w", method, target, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return rawResponse{}, fmt.Errorf("%s %q: body: %w", method, target, err)
	}
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(got)}, nil
}

// parallel runs f(i) for i in [0, n) on workers goroutines and waits.
func parallel(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
