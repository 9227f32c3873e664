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

// listen keeps a connection of its own LISTENing on NotifyChannel until
// ctx ends, and passes what it hears to ev. A lost connection is reported and
// re-established with backoff; every connection after the first is
// reported as again, for a full reload (notifications sent while it was
// down are lost).
func (s *Source) listen(ctx context.Context, dsn string, ev chan<- listenEvent) {
	send := func(e listenEvent) {
		select {
		case ev <- e:
		case <-ctx.Done():
		}
	}
	back := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	again := false
	for ctx.Err() == nil {
		listened, err := s.listenOnce(ctx, dsn, again, send, &back)
		if ctx.Err() != nil {
			return
		}
		again = again || listened
		send(listenEvent{err: fmt.Errorf("rulesdb: listen %s: %w", Redact(dsn), err)})
		s.o.log.Warn("rules listener: connection lost; reconnecting", "error", err)
		if !sleep(ctx, back.next()) {
			return
		}
	}
}

// listenOnce connects, LISTENs and relays notifications until the
// connection fails (its error) or ctx ends; listened reports that it got
// as far as listening. Connecting and LISTEN are bounded by the database's
// timeout.
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
	send(listenEvent{connected: true, again: again})
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		rev, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil {
			continue // not ours
		}
		send(listenEvent{revision: rev})
	}
}
