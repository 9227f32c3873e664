package middleware

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Every is the shortest interval between two lines of a Logger.
const Every = time.Second

// Logger writes at most one line per interval (Every by default) and counts
// the lines it drops; the next line written carries that count as the
// attribute "suppressed". It keeps an attacker who can make every request
// fail (a missing header, a panicking key) from turning each request into a
// log line. The zero value is not usable; build one with NewLogger. A Logger
// is safe for concurrent use.
type Logger struct {
	l          *slog.Logger
	every      int64 // nanoseconds
	now        func() int64
	next       atomic.Int64 // the instant (Unix ns) from which a line may go
	suppressed atomic.Int64
}

// NewLogger returns a Logger writing to l (slog.Default() if nil) at most
// once per Every.
func NewLogger(l *slog.Logger) *Logger {
	if l == nil {
		l = slog.Default()
	}
	return &Logger{l: l, every: int64(Every), now: func() int64 { return time.Now().UnixNano() }}
}

// SetClock replaces the clock (Unix nanoseconds) and the interval, for
// tests.
func (g *Logger) SetClock(now func() int64, every time.Duration) {
	g.now, g.every = now, int64(every)
}

// Warn logs msg with attrs at level Warn, unless a line went out less than
// an interval ago; then it only counts it. It reports whether it wrote.
func (g *Logger) Warn(ctx context.Context, msg string, attrs ...slog.Attr) bool {
	now := g.now()
	next := g.next.Load()
	if now < next || !g.next.CompareAndSwap(next, now+g.every) {
		g.suppressed.Add(1)
		return false
	}
	if n := g.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	g.l.LogAttrs(ctx, slog.LevelWarn, msg, attrs...)
	return true
}

// Undecided logs a request the limiter could not decide and let through.
func (g *Logger) Undecided(ctx context.Context, err error, attrs ...slog.Attr) {
	g.Warn(ctx, "sluice: request not rate limited", append(attrs, slog.String("error", err.Error()))...)
}

// RefundFailed logs a refund that failed.
func (g *Logger) RefundFailed(ctx context.Context, err error) {
	g.Warn(ctx, "sluice: refund failed", slog.String("error", err.Error()))
}
