package daemon_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/service/internal/daemon"
)

// messages is a slog.Handler keeping the messages logged.
type messages struct {
	mu   *sync.Mutex
	msgs *[]string
}

func newMessages() messages { return messages{mu: &sync.Mutex{}, msgs: new([]string)} }

func (m messages) Enabled(context.Context, slog.Level) bool { return true }
func (m messages) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m messages) WithGroup(string) slog.Handler            { return m }
func (m messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	*m.msgs = append(*m.msgs, r.Message)
	return nil
}

func (m messages) logged(msg string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Contains(*m.msgs, msg)
}

// loopback is serve's defaults on ports the kernel picks, without a drain
// delay.
func loopback() daemon.Config {
	c := daemon.Defaults()
	c.GRPCAddr, c.HTTPAddr, c.DrainDelay = "127.0.0.1:0", "127.0.0.1:0", 0
	return c
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestStartFailsNamingTheFlagAndReleases: a Start that cannot listen
// returns an error naming the flag, leaves nothing open (the addresses it
// did listen on are free again) and is never "serving"; Close then does
// nothing, and a second Start is refused.
func TestStartFailsNamingTheFlagAndReleases(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	for _, tc := range []struct {
		flag string
		set  func(c *daemon.Config, grpcAddr, httpAddr string)
	}{
		{"--http-addr", func(c *daemon.Config, g, _ string) { c.GRPCAddr, c.HTTPAddr = g, taken.Addr().String() }},
		{"--pprof-addr", func(c *daemon.Config, g, h string) { c.GRPCAddr, c.HTTPAddr, c.PprofAddr = g, h, taken.Addr().String() }},
	} {
		c := loopback()
		grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
		tc.set(&c, grpcAddr, httpAddr)
		log := newMessages()
		d, err := daemon.New(c, slog.New(log))
		require.NoError(t, err)
		err = d.Start(context.Background())
		require.ErrorContains(t, err, tc.flag+": ")
		for _, addr := range []string{grpcAddr, httpAddr} {
			if addr == taken.Addr().String() {
				continue
			}
			l, err := net.Listen("tcp", addr)
			require.NoError(t, err, "%s: %s is left open", tc.flag, addr)
			require.NoError(t, l.Close())
		}
		require.False(t, log.logged("ratelimitd serving"))
		require.NoError(t, d.Close(context.Background()), "nothing to close")
		require.ErrorContains(t, d.Start(context.Background()), "called twice")
	}
}

// TestNewRefusesAnInvalidConfig: New checks the config, naming the flag.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	c := loopback()
	c.FailureMode = "sometimes"
	_, err := daemon.New(c, nil)
	require.ErrorContains(t, err, "--failure-mode: ")
	_, err = daemon.New(daemon.Config{}, nil)
	require.ErrorContains(t, err, "--grpc-addr: required")
}

// TestCloseDrainsThenStops: Close reports NOT_SERVING at once while the
// servers still answer for the drain delay; the end of Close's context
// cuts the drain short; then the servers are stopped and "ratelimitd
// stopped" is logged.
func TestCloseDrainsThenStops(t *testing.T) {
	c := loopback()
	c.DrainDelay = time.Minute
	log := newMessages()
	d, err := daemon.New(c, slog.New(log))
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	require.True(t, log.logged("ratelimitd serving"))
	get := func(path string) int {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + d.HTTPAddr() + path)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get("/readyz"))

	ctx, cancel := context.WithCancel(context.Background())
	closed := make(chan error, 1)
	go func() { closed <- d.Close(ctx) }()
	require.Eventually(t, func() bool { return get("/readyz") == http.StatusServiceUnavailable }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, http.StatusOK, get("/healthz"), "still answering while draining")
	select {
	case err := <-closed:
		t.Fatalf("Close returned within the drain delay: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the end of Close's context did not cut the drain short")
	}
	require.True(t, log.logged("ratelimitd draining: health reports NOT_SERVING"))
	require.True(t, log.logged("ratelimitd stopped"))
	require.Zero(t, get("/healthz"), "the HTTP server is stopped")
	require.NoError(t, d.Close(context.Background()), "a second Close returns the first one's result")
}

// TestWithClock: the memory store decides on the clock WithClock gives:
// a window spent now is fresh again once that clock, not the real one,
// has moved past it.
func TestWithClock(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(rules, []byte("rules:\n  - name: hourly\n    dimension: user\n    algorithm: fixed_window\n    rate: 1\n    period: 1h\n"), 0o600))
	var shift atomic.Int64
	c := loopback()
	c.Rules = rules
	d, err := daemon.New(c, nil, daemon.WithClock(func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }))
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	defer d.Close(context.Background())
	allowed := func() bool {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Post("http://"+d.HTTPAddr()+"/api/v1/rate-limit/check",
			"application/json", strings.NewReader(`{"key_type":"user","key_value":"ann"}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		var out struct{ Allowed bool }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return out.Allowed
	}
	require.True(t, allowed())
	require.False(t, allowed(), "1 an hour")
	shift.Store(int64(time.Hour))
	require.True(t, allowed(), "an hour later on the daemon's clock")
}
