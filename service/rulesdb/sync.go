package rulesdb

import (
	"context"
	"fmt"
)

// syncState is what a Source knows of the rules in force, for Sync: the
// revision its Watch last put in force (apply returned nil), the last one
// refused, and the revision a Sync waits for.
type syncState struct {
	applied    int64
	refused    int64 // 0: none
	refusedErr error
	watching   bool          // a Watch runs: only its apply says what is in force
	want       int64         // the highest revision a Sync waits for; 0: none
	wake       chan struct{} // Sync to Watch: load now (capacity 1)
	changed    chan struct{} // closed, and replaced, when applied or refused moves
}

// Syncer puts a revision a write committed in force on this instance: Sync
// returns once that revision, or a later one, is in force in the engine
// that follows the database, or an error (a *NotInForceError says which
// revision is). A Source is one; the admin front doors (adminapi, adminui)
// take one.
type Syncer interface {
	Sync(ctx context.Context, revision int64) error
}

var _ Syncer = (*Source)(nil)

// NotInForceError is Sync's error: the revision it waited for is committed
// but not in force on this instance.
type NotInForceError struct {
	// Revision is the revision Sync waited for.
	Revision int64
	// InForce is the revision in force on this instance.
	InForce int64
	// Refused is true when this instance loaded the revision (or a later
	// one) and could not put it in force: the rule set is invalid, or the
	// engine refused it (Err says why; the last good rules stay until a
	// later change). False: the revision was not loaded in time (Err is
	// the context's error).
	Refused bool
	// Err is the cause.
	Err error
}

func (e *NotInForceError) Error() string {
	if e.Refused {
		return fmt.Sprintf("rulesdb: revision %d refused (revision %d stays in force): %v", e.Revision, e.InForce, e.Err)
	}
	return fmt.Sprintf("rulesdb: revision %d not in force yet (revision %d is): %v", e.Revision, e.InForce, e.Err)
}

// Unwrap returns the cause.
func (e *NotInForceError) Unwrap() error { return e.Err }

// Sync returns once revision (one a write of this process committed), or a
// later one, is in force: Watch has loaded it (incrementally, as any
// change) and the apply function it was given returned nil. Sync asks
// Watch to load at once rather than on the next notification or poll, and
// waits at most the database's timeout (WithTimeout) or until ctx ends.
// Otherwise it returns a *NotInForceError saying which revision is in
// force: Refused when that revision, or a later one, was loaded and
// refused (an invalid rule set, or apply's error), or the context's error
// when it was not in force in time. Sync waits for a Watch: without one
// running it waits its whole bound. It is safe for concurrent use.
func (s *Source) Sync(ctx context.Context, revision int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	s.mu.Lock()
	s.sync.want = max(s.sync.want, revision)
	s.mu.Unlock()
	select {
	case s.sync.wake <- struct{}{}:
	default: // a wake is pending: Watch reads want when it takes it
	}
	for {
		s.mu.Lock()
		st := s.sync
		s.mu.Unlock()
		switch {
		case st.applied >= revision:
			return nil
		case st.refused >= revision:
			return &NotInForceError{Revision: revision, InForce: st.applied, Refused: true, Err: st.refusedErr}
		}
		select {
		case <-st.changed:
		case <-ctx.Done():
			return &NotInForceError{Revision: revision, InForce: st.applied, Err: ctx.Err()}
		}
	}
}

// InForce returns the revision in force: the last one Watch put in force
// (apply returned nil), or, before Watch runs, that of the last Load.
func (s *Source) InForce() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sync.applied
}

// wanted returns the revision a Sync waits for (0: none).
func (s *Source) wanted() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sync.want
}

// settled records the outcome of a load of revision rev: in force (err
// nil) or refused (err says why), and wakes the Syncs.
func (s *Source) settled(rev int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.sync.applied = rev
	} else {
		s.sync.refused, s.sync.refusedErr = rev, err
	}
	close(s.sync.changed)
	s.sync.changed = make(chan struct{})
}

// dropWant forgets the wish of the Syncs for revision w when no later one
// came meanwhile: the database is behind it (a backup restored), so no
// load can satisfy them (they wait their bound).
func (s *Source) dropWant(w int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sync.want == w {
		s.sync.want = 0
	}
}

// watching records that a Watch runs (or no longer does).
func (s *Source) watching(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sync.watching = on
}
