package rulesdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/service/rules"
)

// Watch follows the database until ctx ends (then it returns nil) and
// calls apply with the snapshot of each new revision. It polls the
// revision every poll interval; on PostgreSQL it also listens for the
// writes' notifications (a revision other than the one in force is loaded
// at once) and reloads fully each time its listening connection is
// re-established (see Listener). A Sync makes it load at once the revision
// it waits for. A Source of OpenSource that has not connected yet keeps
// trying (backoff up to 5 s), then migrates and reloads fully. An invalid
// rule set, a snapshot apply refuses (its error) or a database error is
// reported to onError (once until it changes; apply's refusal is the
// caller's to report) and the last good snapshot stays in force; when the
// database answers again after a failed poll, Watch reloads fully. Each
// poll and load is bounded by the database's timeout (WithTimeout). The
// first poll compares against the revision of the last snapshot Load
// returned, which Watch takes as the one in force (or, if Load was never
// called, the revision the database has when Watch starts).
func (s *Source) Watch(ctx context.Context, apply func(*rules.Snapshot) error, onError func(error)) error {
	if s.poll < 0 {
		return fmt.Errorf("rulesdb: poll interval: must be positive, got %s", s.poll)
	}
	ctx, cancel := context.WithCancel(ctx)
	var listeners sync.WaitGroup
	defer listeners.Wait()
	defer cancel()

	w := &follower{s: s, ctx: ctx, apply: apply, onError: onError, ev: make(chan listenEvent, 16),
		retryBack: backoff{min: 100 * time.Millisecond, max: 5 * time.Second}}
	s.mu.Lock()
	w.last, w.seen, w.pending = s.loaded, s.seen, s.fromCache
	s.mu.Unlock()
	s.watching(true)
	defer s.watching(false)
	listening := false
	back := w.retryBack
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		db := s.DB()
		if db == nil {
			d, err := s.connect(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				w.report(err)
				if !sleep(ctx, back.next()) {
					return nil
				}
				continue
			}
			back.reset()
			s.o.log.Info("rules database connected", "db", Redact(s.dsn))
			db, w.pending = d, true
		}
		if !w.seen {
			w.first(db)
		}
		if db.pg && !listening {
			listening = true
			listeners.Go(func() { s.listen(ctx, db.dsn, w.ev) })
		}
		retry := w.catchUp(db)
		select {
		case <-ctx.Done():
			return nil
		case <-retry:
		case <-s.sync.wake: // catchUp loads what Sync waits for
		case <-t.C:
			w.poll(db)
		case e := <-w.ev:
			w.heard(db, e)
		}
	}
}

// follower is the state of one Watch.
type follower struct {
	s       *Source
	ctx     context.Context
	apply   func(*rules.Snapshot) error
	onError func(error)
	ev      chan listenEvent

	last       int64 // the revision last loaded (in force, or refused)
	seen       bool
	pending    bool // a full reload is due (a reconnect, the cache in force)
	pollFailed bool
	lastErr    string
	retryBack  backoff
}

// report passes err to onError, once until the error changes.
func (w *follower) report(err error) {
	if err.Error() != w.lastErr {
		w.lastErr = err.Error()
		w.onError(err)
	}
}

// first takes the database's revision as the one in force, when Load was
// never called.
func (w *follower) first(db *DB) {
	rev, err := db.Revision(w.ctx)
	if err != nil {
		rev = -1
	}
	w.last, w.seen = rev, true
}

// catchUp makes the loads that are due: a full one after a reconnect, or
// the revision a Sync waits for. It returns a channel that fires when a
// failed load is to be tried again (nil when none failed).
func (w *follower) catchUp(db *DB) <-chan time.Time {
	switch want := w.s.wanted(); {
	case w.pending:
		// A full reload that failed (the database not quite back yet) is
		// retried with backoff, not left to the next poll.
		if w.reload(db, true); w.pending {
			return time.After(w.retryBack.next()) // collected unfired (Go 1.23+)
		}
	case want > w.last:
		if !w.reload(db, false) {
			return time.After(w.retryBack.next())
		}
		if w.last < want {
			w.s.dropWant(want)
		}
	}
	w.retryBack.reset()
	return nil
}

// reload loads the current revision and applies it when it is new (or
// always, when force: a reconnect may have missed anything). It reports
// false when the load failed and is worth trying again (a database error).
func (w *follower) reload(db *DB, force bool) bool {
	s := w.s
	lctx, cancel := context.WithTimeout(w.ctx, s.timeout)
	var snap *rules.Snapshot
	var st *state
	err := onLiveConn(lctx, func() (err error) {
		snap, st, err = s.loadDB(lctx, db, force)
		return err
	})
	cancel()
	if w.ctx.Err() != nil {
		return true // Watch is ending
	}
	if err != nil {
		w.report(err)
		if !errors.Is(err, ErrInvalid) {
			return false
		}
		// Not loaded again until the revision moves.
		w.last, w.pending = st.Revision, false
		s.settled(st.Revision, err)
		return true
	}
	w.lastErr, w.pending = "", false
	changed := st.Revision != w.last
	w.last = st.Revision
	s.mark(st.Revision, false)
	if !changed && !force {
		return true
	}
	if err := w.apply(snap); err != nil {
		s.settled(st.Revision, err) // offered again once the revision moves
		return true
	}
	s.settled(st.Revision, nil)
	s.save(st) // after apply: the new rules are in force first
	return true
}

// poll reads the revision and loads it when it moved; after failed polls,
// the first good one makes a full reload due.
func (w *follower) poll(db *DB) {
	pctx, cancel := context.WithTimeout(w.ctx, w.s.timeout)
	var rev int64
	err := onLiveConn(pctx, func() (err error) {
		rev, err = db.Revision(pctx)
		return err
	})
	cancel()
	switch {
	case w.ctx.Err() != nil:
	case err != nil:
		w.report(err)
		w.pollFailed = true
	case w.pollFailed:
		// The database is reachable again: whatever happened while it
		// was not, reload fully.
		w.pollFailed, w.pending = false, true
	case rev != w.last:
		w.reload(db, false)
	}
}

// heard acts on what the listener tells.
func (w *follower) heard(db *DB, e listenEvent) {
	switch {
	case e.err != nil:
		w.report(e.err)
	case e.connected && e.again:
		w.s.o.log.Info("rules listener reconnected: reloading")
		w.pending = true
	case e.connected:
		// Anything written before LISTEN took effect is caught by this
		// check (and by the poll).
		rev, err := db.Revision(w.ctx)
		if err == nil && rev != w.last {
			w.reload(db, false)
		}
	case e.revision != w.last:
		// Newer, as a rule; older only after the database was restored
		// from a backup (a wasted load otherwise).
		w.reload(db, false)
	}
}
