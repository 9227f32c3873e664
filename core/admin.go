package core

import (
	"context"
	"fmt"
	"time"
)

// SetPolicies replaces the Limiter's policies at once, after validating them
// all; on error the current policies stay. Requests in flight finish under
// the policies they started with. Keys are identity and policy name, so a
// policy that keeps its name keeps its counts.
func (l *Limiter) SetPolicies(policies []Policy) error {
	set, err := compilePolicies(policies, &l.cfg)
	if err != nil {
		return err
	}
	l.set.Store(set)
	return nil
}

// Policies returns a copy of the Limiter's current policies.
func (l *Limiter) Policies() []Policy {
	set := l.set.Load()
	ps := make([]Policy, len(set.policies))
	for i := range set.policies {
		ps[i] = set.policies[i].Policy
	}
	return ps
}

// Reset forgets identity's state under policy: its next request sees a
// fresh key. identity is what the policy's Key returns.
func (l *Limiter) Reset(ctx context.Context, policy, identity string) error {
	set := l.set.Load()
	for i := range set.policies {
		if p := &set.policies[i]; p.Name == policy {
			k := Key{Identity: identity, Policy: p.Name}
			if err := l.store.Reset(ctx, k, p.Limit); err != nil {
				return err
			}
			for _, tl := range p.Tiers {
				if err := l.store.Reset(ctx, k, tl); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return fmt.Errorf("sluice: Reset: no policy %q", policy)
}

// SetOverride gives identity a different limit under policy until until (a
// temporary raise for a customer, say). With Redis every instance sees it
// at once. Setting the override already in force (the same lim and until)
// keeps what it has counted (see Store.SetOverride).
func (l *Limiter) SetOverride(ctx context.Context, policy, identity string, lim Limit, until time.Time) error {
	if lim == (Limit{}) {
		return fmt.Errorf("sluice: SetOverride: %w", invalidField(ErrInvalidLimit, "lim", "a zero Limit (use Block)"))
	}
	return l.override(ctx, "SetOverride", policy, identity, &Override{Limit: lim, Until: until})
}

// Block denies every request of identity under policy until until. A
// denial tells the wait until the request passes, its own count deciding
// from until on (a drained identity waits past the block; see
// Store.SetOverride).
func (l *Limiter) Block(ctx context.Context, policy, identity string, until time.Time) error {
	return l.override(ctx, "Block", policy, identity, &Override{Until: until})
}

// ClearOverride ends identity's override or block under policy.
func (l *Limiter) ClearOverride(ctx context.Context, policy, identity string) error {
	return l.override(ctx, "ClearOverride", policy, identity, nil)
}

// override sets o as identity's override under policy, or clears it when
// o is nil.
func (l *Limiter) override(ctx context.Context, fn, policy, identity string, o *Override) error {
	if identity == "" {
		return fmt.Errorf("sluice: %s: %w", fn, invalidField(ErrNoKey, "identity", "empty key"))
	}
	set := l.set.Load()
	for i := range set.policies {
		if p := &set.policies[i]; p.Name == policy {
			k := Key{Identity: identity, Policy: p.Name}
			var err error
			if o != nil {
				err = l.store.SetOverride(ctx, k, *o)
			} else {
				err = l.store.ClearOverride(ctx, k)
			}
			if err != nil {
				return fmt.Errorf("sluice: %s: policy %q: %w", fn, policy, nested{err})
			}
			return nil
		}
	}
	return fmt.Errorf("sluice: %s: no policy %q", fn, policy)
}
