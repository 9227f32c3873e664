package core

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/rank"
)

// PolicyResult is the decision of one policy for one request.
type PolicyResult struct {
	Policy string
	// Limit is the limit applied: the policy's, its tier's, the identity's
	// override (see Limiter.SetOverride), or, when a guard's fallback
	// decided (see core/guard), its local share of one of them. A blocked
	// identity (see Limiter.Block) is described by the policy's (or tier's)
	// limit, with nothing remaining. Limit and Result.Capacity (its
	// capacity) are the one statement of the limit applied that every
	// formatter reads: the headers' q and X-RateLimit-Limit, gRPC's quota,
	// ratelimitd's limit, whatever answered (a guard failing open or closed
	// included). The waits, under a block or an override, are the
	// key's as a whole: RetryAfter until the request passes and ResetAfter
	// until the key is fresh, the identity's own state deciding once the
	// override ends (see docs/algorithms.md, "Waits").
	Limit Limit
	// Tier is the caller's tier when the policy has tiers.
	Tier string
	// Shadow: the policy is on trial; its denial did not deny the request.
	Shadow bool
	// Unidentified: the policy's Key found no identity for the request and
	// its MissingKey is DenyRequest. The store was not asked: the Result is
	// a denial with RetryAfter RetryNever.
	Unidentified bool
	refund       RefundWhen // next to Shadow: one word for them all
	Result
	id    string // the identity: the store key is Key{id, Policy} (see key)
	cost  int64
	lease time.Duration // the policy's Lease, carried to its ops and admissions
}

// key is the Key of p's state in the store.
func (p *PolicyResult) key() Key { return Key{Identity: p.id, Policy: p.Policy} }

// admission names what p counted in the store, for a refund or a cancel:
// false when it counted nothing there (denied, already given back, or
// answered by a guard's failure policy, whose Result names no admission of
// the shared store), or was admitted under an override the store cannot
// name (its state cannot be found, and the key's own state did not count
// it). p.Limit is the policy's limit, or, for an admission under an
// override, the override's, whose state it goes back to.
func (p *PolicyResult) admission() (Admission, bool) {
	if !p.Allowed || p.cost == 0 || p.Source.Degraded() || p.Applied != nil && p.Override == 0 {
		return Admission{}, false
	}
	return Admission{Key: p.key(), Limit: p.Limit, Cost: p.cost, At: p.At, Override: p.Override, Lease: p.lease}, true
}

// op is the store op that decides p. Until the decision is settled (see
// settle), p.Limit is the policy's (or tier's) limit, which the key's state
// is stored under.
func (p *PolicyResult) op() Op {
	return Op{Key: p.key(), Limit: p.Limit, Cost: p.cost, Shadow: p.Shadow, Lease: p.lease}
}

// ShadowDenied reports whether a shadow policy would have denied the request.
func (p *PolicyResult) ShadowDenied() bool { return p.Shadow && !p.Allowed }

// Decision is the outcome of a request under every policy of a Limiter.
// A Decision returned by Check, CheckWith or Peek may be copied; one filled
// by Decide may not (its Results may point into it): pass it by pointer. A
// Decision is not safe for concurrent modification.
type Decision struct {
	// Allowed is false if any policy denied the request.
	Allowed bool
	// Repeat: the request repeated an admitted one (same idempotency key)
	// and passed without being counted.
	Repeat bool
	// Results holds one entry per policy, in the Limiter's order.
	Results []PolicyResult
	// Binding is the index in Results of the most constraining policy: if
	// some policy denied, the denying one with the longest RetryAfter;
	// otherwise the one with the fewest requests Remaining (on a tie, the
	// longest ResetAfter). Shadow policies bind only when every policy is a
	// shadow. It drives the headers.
	Binding int

	// Skipped names the policies that matched the request but were left out
	// of its decision because their Key found no identity for it (see
	// MissingKey); nil if none. The names are the policies' own strings,
	// and the slice may be shared with the Limiter: do not modify it.
	Skipped []string

	buf  [1]PolicyResult // Results of one policy, without an allocation
	idem *idemRecord     // the idempotency record a counted original wrote
	sctx detached        // the context of store calls (see storeContext)
}

// idemRecord is the idempotency record a counted original wrote, and the
// instant it was written at, for its refund. A Decision holds a pointer, set
// only for idempotent originals, so that every other request's Decision
// stays small (it is allocated once per request).
type idemRecord struct {
	key Key
	at  int64
}

// detached is a context with the values of its parent but not its
// cancellation or deadline: a decision that has begun is finished even when
// the client goes away, so that a request is always counted or refused. It
// lives in the Decision so that detaching costs no allocation.
type detached struct{ parent context.Context }

func (c *detached) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *detached) Done() <-chan struct{} { return nil }

func (c *detached) Err() error { return nil }

func (c *detached) Value(key any) any { return c.parent.Value(key) }

func (c *detached) String() string { return "sluice.detached" }

// Limited reports whether any policy applied to the request.
func (d *Decision) Limited() bool { return len(d.Results) > 0 }

// Bound returns the most constraining result (zero if there is none).
func (d *Decision) Bound() PolicyResult {
	if d.Binding < len(d.Results) {
		return d.Results[d.Binding]
	}
	return PolicyResult{}
}

// State returns the most severe warning state over the policies that are
// not shadows: a policy on trial never changes what a client sees, so a
// Decision of shadow policies only is Normal.
func (d *Decision) State() State {
	s := Normal
	for i := range d.Results {
		if !d.Results[i].Shadow {
			s = max(s, d.Results[i].State)
		}
	}
	return s
}

// settle makes each result state the limit applied (see PolicyResult.settle).
func (d *Decision) settle() {
	for j := range d.Results {
		d.Results[j].settle()
	}
}

// settle makes p state the limit applied, once the store has decided: its
// Limit becomes the store's Applied when there is one (an override's, or
// a guard's share of the limit in fallback), and its Capacity that Limit's
// capacity, whoever decided (a guard failing open included).
func (p *PolicyResult) settle() {
	if a := p.Applied; a != nil {
		p.Limit = *a
	}
	p.Capacity = p.Limit.Capacity()
}

// detach makes d safe to copy: its slices no longer point into d itself.
func (d *Decision) detach() {
	d.Results = slices.Clone(d.Results)
	if d.Skipped != nil {
		d.Skipped = slices.Clone(d.Skipped)
	}
}

// Refundable reports whether some policy of d may give the request back
// after the response (so the adapter must watch its status).
func (d *Decision) Refundable() bool {
	for i := range d.Results {
		if d.Results[i].refund != RefundNever && d.Results[i].cost > 0 {
			return true
		}
	}
	return false
}

// binding picks the most constraining result (package internal/rank has
// the rule): among denials, the longest RetryAfter; among admissions, the
// fewest Remaining, then the longest ResetAfter; the first of equals.
// Shadow policies bind only when every policy is a shadow.
func binding(rs []PolicyResult) int {
	best := 0
	for i := 1; i < len(rs); i++ {
		if rank.Binds(rs[i].rank(), rs[best].rank()) {
			best = i
		}
	}
	return best
}

// rank is what the binding rule reads of p.
func (p *PolicyResult) rank() rank.Result {
	return rank.Result{Shadow: p.Shadow, Allowed: p.Allowed, RetryAfter: p.RetryAfter, Remaining: p.Remaining, ResetAfter: p.ResetAfter}
}
