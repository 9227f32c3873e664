package middleware

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLoggerRateLimits: however many goroutines log, at most one line per
// interval goes out, and the next line carries the number dropped.
func TestLoggerRateLimits(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	l := NewLogger(slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil)))
	var now atomic.Int64
	l.SetClock(now.Load, time.Second)
	var wrote atomic.Int64
	for second := range 5 {
		now.Store(int64(second) * int64(time.Second))
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					if l.Warn(context.Background(), "sluice: request not rate limited", slog.String("error", "x")) {
						wrote.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	require.EqualValues(t, 5, wrote.Load(), "one line per second")
	out := buf.String()
	require.Equal(t, 5, strings.Count(out, "request not rate limited"))
	require.Equal(t, 4, strings.Count(out, "suppressed=1599"), out)
}

func TestUndecidedLine(t *testing.T) {
	var buf bytes.Buffer
	l := NewLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	l.Undecided(context.Background(), errors.New("boom"), slog.String("method", "/a/b"))
	require.Contains(t, buf.String(), `msg="sluice: request not rate limited" method=/a/b error=boom`)
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
