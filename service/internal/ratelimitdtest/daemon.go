package ratelimitdtest

import (
	"context"
	"flag"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/service/internal/daemon"
)

// Daemon is ratelimitd's daemon (daemon.Daemon) run in this process: what
// `ratelimitd serve` runs, without the process around it (its signals and
// exit code; tests of those use Start). Its logs are JSON, kept.
type Daemon struct {
	// GRPCAddr and HTTPAddr are where it listens (127.0.0.1:port).
	GRPCAddr, HTTPAddr string

	d    *daemon.Daemon
	logs *syncBuffer
}

// Config returns the Config that `ratelimitd serve` reads from ServeArgs
// (args): flags only, no environment; validated.
func Config(args ...string) (daemon.Config, error) {
	var c daemon.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse(ServeArgs(args...)); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (flags only)", fs.Arg(0))
	}
	return c, c.Validate()
}

// StartDaemon starts the daemon of c and opts in this process, its logs in
// JSON whatever c.LogFormat says, and closes it on test cleanup. It returns
// once the daemon serves; a daemon that does not start fails the test.
func StartDaemon(t testing.TB, c daemon.Config, opts ...daemon.Option) *Daemon {
	t.Helper()
	d, err := LaunchDaemon(c, opts...)
	if err != nil {
		t.Fatalf("ratelimitdtest: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// LaunchDaemon is StartDaemon for a program rather than a test (the
// demos): it returns once the daemon serves, or an error with its logs.
// The caller ends it with Close.
func LaunchDaemon(c daemon.Config, opts ...daemon.Option) (*Daemon, error) {
	c.LogFormat = "json"
	logs := &syncBuffer{}
	d, err := daemon.New(c, c.NewLogger(logs), opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		return nil, fmt.Errorf("ratelimitd did not start: %w; logs:\n%s", err, logs)
	}
	return &Daemon{GRPCAddr: d.GRPCAddr(), HTTPAddr: d.HTTPAddr(), d: d, logs: logs}, nil
}

// Close drains and stops the daemon (daemon.Daemon.Close) and returns its
// failure, nil after a clean stop. Later calls return the first one's
// result.
func (d *Daemon) Close() error { return d.d.Close(context.Background()) }

// Failed is closed when the daemon fails on its own (daemon.Daemon.Failed).
func (d *Daemon) Failed() <-chan struct{} { return d.d.Failed() }

// Logs returns everything the daemon logged so far.
func (d *Daemon) Logs() string { return d.logs.String() }

// Conn returns a gRPC client connection to the daemon, closed on cleanup.
func (d *Daemon) Conn(t testing.TB) *grpc.ClientConn { return dial(t, d.GRPCAddr) }

// URL returns the daemon's HTTP URL of path ("/readyz").
func (d *Daemon) URL(path string) string { return "http://" + d.HTTPAddr + path }
