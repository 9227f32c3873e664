package rulesdb

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// listenEvent is what the PostgreSQL listener tells Watch: a notified
// revision, that it is (again) listening, or why its connection failed.
type listenEvent struct {
	revision  int64
	connected bool
	again     bool // connected after a lost connection: reload fully
	err       error
}

// ListenerState is the health of a Source's PostgreSQL listener: the
// connection of its own that LISTENs for the writes' notifications.
type ListenerState struct {
	// Enabled is true on PostgreSQL (SQLite has no listener: every other
	// field is then zero).
	Enabled bool
	// Up is true while the listener's connection is LISTENing and answers
	// its probes.
	Up bool
	// Since is when Up last changed (when Watch started the listener, at
	// first).
	Since time.Time
	// Reconnects counts the connections re-established after one was
	// lost (each followed by a full reload).
	Reconnects int64
}

// Listener returns the state of the Source's listener. A listener that has
// heard nothing for the database's timeout (WithTimeout) probes its
// connection with SELECT 1, which must answer within that timeout too: a
// connection that no longer carries anything (a network partition that
// drops packets without closing it) is noticed within twice the timeout,
// closed and replaced, and the reconnection reloads fully.
func (s *Source) Listener() ListenerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.listener
	l.Enabled = s.pg
	return l
}

// setListener records the listener going up or down (again: up after a
// lost connection, one more reconnect).
func (s *Source) setListener(up, again bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if again && up {
		s.listener.Reconnects++
	}
	if s.listener.Up != up || s.listener.Since.IsZero() {
		s.listener.Up, s.listener.Since = up, s.now()
	}
}

// listen keeps a connection of its own LISTENing on NotifyChannel until
// ctx ends, and passes what it hears to ev. A lost connection (or one that
// fails its probe) is reported and re-established with backoff; every
// connection after the first is reported as again, for a full reload
// (notifications sent while it was down are lost).
func (s *Source) listen(ctx context.Context, dsn string, ev chan<- listenEvent) {
	send := func(e listenEvent) {
		select {
		case ev <- e:
		case <-ctx.Done():
		}
	}
	s.setListener(false, false)
	back := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	again := false
	for ctx.Err() == nil {
		listened, err := s.listenOnce(ctx, dsn, again, send, &back)
		if ctx.Err() != nil {
			return
		}
		s.setListener(false, false)
		again = again || listened
		send(listenEvent{err: fmt.Errorf("rulesdb: listen %s: %w", Redact(dsn), err)})
		s.o.log.Warn("rules listener: connection lost; reconnecting", "error", err)
		if !sleep(ctx, back.next()) {
			return
		}
	}
}

// listenOnce connects, LISTENs and relays notifications until the
// connection fails or fails a probe (its error) or ctx ends; listened
// reports that it got as far as listening. Connecting and every probe are
// bounded by the database's timeout.
func (s *Source) listenOnce(ctx context.Context, dsn string, again bool, send func(listenEvent), back *backoff) (listened bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	conn, err := pgx.Connect(cctx, dsn)
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+NotifyChannel)
	}
	cancel()
	if conn != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = conn.Close(cctx)
		}()
	}
	if err != nil {
		return false, err
	}
	back.reset()
	s.setListener(true, again)
	send(listenEvent{connected: true, again: again})
	for {
		rev, err := s.wait(ctx, conn)
		if err != nil {
			return true, err
		}
		if rev >= 0 {
			send(listenEvent{revision: rev})
		}
	}
}

// wait waits for the next notification on conn (its revision; -1 for a
// payload that is not ours, or when nothing came for the database's
// timeout and conn answered a probe). It fails when conn fails, or does
// not answer the probe within the timeout.
func (s *Source) wait(ctx context.Context, conn *pgx.Conn) (int64, error) {
	wctx, cancel := context.WithTimeout(ctx, s.timeout)
	n, err := conn.WaitForNotification(wctx)
	quiet := wctx.Err() != nil && ctx.Err() == nil
	cancel()
	switch {
	case err != nil && quiet:
		// Nothing heard for a while: is anyone still there?
		pctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		if _, err := conn.Exec(pctx, "SELECT 1"); err != nil {
			return 0, fmt.Errorf("probe (SELECT 1 within %s): %w", s.timeout, err)
		}
		return -1, nil
	case err != nil:
		return 0, err
	}
	rev, err := strconv.ParseInt(n.Payload, 10, 64)
	if err != nil {
		return -1, nil // not ours
	}
	return rev, nil
}
