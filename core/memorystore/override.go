package memorystore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/algo"
	"github.com/sluicehq/sluice/core/storekit"
)

// override is a key's replacement limit (nil spec: blocked) until an
// instant in µs. It counts on its own state (its generation is mixed into
// the key's hash), fresh for each override.
type override struct {
	spec  *algo.Spec
	lim   core.Limit // as given (zero: blocked)
	until int64
	gen   uint64
}

// SetOverride replaces k's limit until o.Until; see core.Store. Setting
// the override already in force for k (the same Limit and Until) changes
// nothing: its state, and what it has counted, stay.
func (s *Store) SetOverride(_ context.Context, k core.Key, o core.Override) error {
	if err := s.open(); err != nil {
		return fmt.Errorf("memorystore: SetOverride: %w", err)
	}
	if k.Identity == "" {
		return fmt.Errorf("memorystore: SetOverride: %w", errNoIdentity)
	}
	if err := storekit.ValidateOverride(o, time.UnixMicro(s.now())); err != nil {
		return fmt.Errorf("memorystore: SetOverride: %w", err)
	}
	ov := override{lim: o.Limit, until: o.Until.UnixMicro()}
	if !o.Blocks() {
		sp, err := s.spec(&o.Limit)
		if err != nil {
			return fmt.Errorf("memorystore: SetOverride: %w", storekit.FieldIn("Limit", err))
		}
		ov.spec = sp
	}
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	if s.overrides == nil {
		s.overrides = map[core.Key]override{}
	}
	if cur, ok := s.overrides[k]; ok && cur.lim == ov.lim && cur.until == ov.until {
		return nil // already in force: keep its generation, hence its state
	}
	ov.gen = s.ovGen.Add(1)
	if len(s.overrides) >= s.ovPruneAt {
		s.pruneOverrides(s.now())
	}
	// The key may alias a request buffer that is reused (Fiber): keep a copy.
	s.overrides[core.Key{Identity: strings.Clone(k.Identity), Policy: strings.Clone(k.Policy)}] = ov
	s.nOverrides.Store(int64(len(s.overrides)))
	return nil
}

// ClearOverride removes k's override.
func (s *Store) ClearOverride(_ context.Context, k core.Key) error {
	if err := s.open(); err != nil {
		return fmt.Errorf("memorystore: ClearOverride: %w", err)
	}
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	delete(s.overrides, k)
	s.nOverrides.Store(int64(len(s.overrides)))
	return nil
}

// overridden returns k's override in force at now, if any. It costs one
// atomic load while no override exists.
func (s *Store) overridden(k core.Key, now int64) (override, bool) {
	if s.nOverrides.Load() == 0 {
		return override{}, false
	}
	s.ovMu.RLock()
	ov, ok := s.overrides[k]
	s.ovMu.RUnlock()
	if !ok || ov.until <= now {
		return override{}, false
	}
	return ov, true
}

// blocked is the Result of a request to a blocked key, as the block alone
// tells it: denied until the block ends, nothing stored (handover then
// adds the wait of the key's own state).
func blocked(sp *algo.Spec, until, now int64) core.Result {
	wait := time.Duration(until-now) * time.Microsecond
	return core.Result{Capacity: sp.Capacity, RetryAfter: wait, ResetAfter: wait, State: core.Throttled, Previous: core.Throttled, At: now}
}

// minOverridePrune is the size of the overrides map below which ended
// overrides are not looked for.
const minOverridePrune = 64

// pruneOverrides drops the overrides that ended by now (µs), and sets the
// size at which to look again: twice what is left, so that the cost is
// amortized over the SetOverride calls. s.ovMu is held.
func (s *Store) pruneOverrides(now int64) {
	for k, ov := range s.overrides {
		if ov.until <= now {
			delete(s.overrides, k)
		}
	}
	s.ovPruneAt = max(minOverridePrune, 2*len(s.overrides))
}
