package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// Bounds of a Descriptors call.
const (
	maxDescriptors = 256
	maxEntries     = 32
	maxEntryBytes  = 1024
)

// Descriptor is one descriptor of an Envoy rate-limit request: its ordered
// entries, and the hits it adds.
type Descriptor struct {
	// Entries are the descriptor's key/value pairs, in order. A descriptor
	// without entries, or with an empty key, matches no rule (it is OK,
	// nothing counted), as envoyproxy/ratelimit answers it.
	Entries []rules.Entry
	// Cost is the hits the descriptor adds (Envoy's hits_addend: the
	// front door turns "unset" into 1); 0 peeks.
	Cost int64
	// Negative makes Cost hits a refund (Envoy's is_negative_hits): see
	// Engine.Descriptors for what is given back.
	Negative bool
}

// DescriptorResult is the status of one descriptor.
type DescriptorResult struct {
	// Rule is the rule that decided the descriptor; nil when no rule
	// applies (no rule matches, or a matching rule of the request replaces
	// it): the descriptor is OK and nothing was counted.
	Rule *rules.Rule
	// Result is the rule's decision for the descriptor (Policy is the
	// rule's ID; Limit, ResetAfter and RetryAfter describe its counter; for
	// a Deny rule, a denial with Capacity 0 until the end of the unit's
	// window); zero when Rule is nil or Unlimited. Allowed and Remaining
	// are the descriptor's own, in request order, as envoyproxy/ratelimit
	// states them: when the request was admitted, Remaining is what its
	// counter has left after the hits of this descriptor and of the
	// earlier descriptors of the same counter; when nothing was counted
	// (the request was refused, or a shadow rule would refuse it), a
	// descriptor whose hits, with the earlier ones of its counter, exceed
	// what the counter has left is denied with Remaining 0, and any other
	// is allowed with what the counter has left.
	Result core.PolicyResult
	// Unlimited: the rule is unlimited (Envoy's unlimited: true): OK,
	// nothing counted.
	Unlimited bool
}

// DescriptorsResult is the answer to an Envoy rate-limit request.
type DescriptorsResult struct {
	// Allowed is the overall code: false when a rule that is not a shadow
	// denied a descriptor.
	Allowed bool
	// Statuses holds one status per descriptor, in the request's order.
	Statuses []DescriptorResult
	// Degraded is core.FromStore when the store decided every counter;
	// otherwise the guard's failure mode that answered instead (see
	// Result.Degraded and DegradedName).
	Degraded core.Source
	// Decision is the request's decision under every rule counted (one
	// PolicyResult per counter, Binding the most constraining), for the
	// rate-limit header fields (ratelimitfields).
	Decision core.Decision
}

// Descriptors decides an Envoy rate-limit request of domain: every
// descriptor reaches at most one rule (Snapshot.MatchDescriptor), and the
// descriptors that add hits are decided all or nothing, each with its own
// cost (0 peeks): if one is denied, no descriptor's counter takes anything.
// Two descriptors reaching one counter (the same rule and values) take
// their summed cost from it, and each reports its own status (see
// DescriptorResult.Result). A descriptor of cost 0 never denies the
// request: it is OK, and says what is left. A rule named by the
// replaces of another rule matched in the same request does not apply; an
// unlimited rule matches and counts nothing; a Deny rule (Envoy's
// requests_per_unit: 0) matches, counts nothing and denies the request,
// whatever the descriptor's cost or sign: its status's Result is a denial
// with no capacity, RetryAfter and ResetAfter until the end of the rule's
// unit's current window (windows aligned on the Unix epoch), and, all or
// nothing, the other descriptors' counters are only peeked; a shadow
// rule's denial (a Deny rule's too) is reported in its status but does
// not deny the request.
//
// A Negative descriptor gives Cost hits back to its counter, after the
// decision of the others, within what the counter's algorithm can give
// back without ever admitting more than its limit promises (the refund of
// an admission made now, docs/algorithms.md "Refunds"): a fixed window
// and a sliding window counter lower their current window's count (never
// below zero); the buckets (token, leaky, GCRA) give back up to what they
// still hold; a sliding window log, whose entries are single admissions
// the request cannot name, gives back nothing. Its status is its counter
// after the refund, allowed even when the counter is spent
// (envoyproxy/ratelimit answers negative hits OK).
//
// A descriptor without entries, or with an entry without key, matches no
// rule (OK, nothing counted). Invalid input (no domain, no descriptors, a
// negative cost, or sizes over the bounds) wraps ErrInvalid, naming the
// field ("descriptors[1].entries[0].key"). A store failure is an error
// wrapping the store's; under a guard, its failure mode answers instead
// and DescriptorsResult.Degraded says so.
func (e *Engine) Descriptors(ctx context.Context, domain string, ds []Descriptor) (DescriptorsResult, error) {
	start := time.Now()
	res, ids, err := e.descriptors(ctx, domain, ds, len(e.cfg.observers) > 0)
	e.observe(ctx, KindDescriptors, nil, ids, &res.Decision, start, err)
	if err != nil {
		return DescriptorsResult{}, err
	}
	return res, nil
}

func validateDescriptors(domain string, ds []Descriptor) error {
	switch {
	case domain == "":
		return invalid("domain", "required")
	case len(domain) > maxEntryBytes:
		return invalid("domain", "at most %d bytes, got %d", maxEntryBytes, len(domain))
	case len(ds) == 0:
		return invalid("descriptors", "required")
	case len(ds) > maxDescriptors:
		return invalid("descriptors", "at most %d, got %d", maxDescriptors, len(ds))
	}
	for i := range ds {
		d := &ds[i]
		switch {
		case len(d.Entries) > maxEntries:
			return invalid(fmt.Sprintf("descriptors[%d].entries", i), "at most %d, got %d", maxEntries, len(d.Entries))
		case d.Cost < 0:
			return invalid(fmt.Sprintf("descriptors[%d].hits_addend", i), "must not be negative, got %d", d.Cost)
		}
		for j, en := range d.Entries {
			switch {
			case len(en.Key) > maxEntryBytes:
				return invalid(fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), "at most %d bytes, got %d", maxEntryBytes, len(en.Key))
			case len(en.Value) > maxEntryBytes:
				return invalid(fmt.Sprintf("descriptors[%d].entries[%d].value", i, j), "at most %d bytes, got %d", maxEntryBytes, len(en.Value))
			}
		}
	}
	return nil
}

// descMatch is the rule a descriptor of a Descriptors call reaches.
type descMatch struct {
	rule *rules.Rule
	id   string
	op   int   // index in the call's ops, -1 if none
	upto int64 // the cost of op's descriptors up to this one, itself included
}

// descPlan is what a Descriptors call decides: the rule each descriptor
// reaches, the ops of their counters, the Deny rules' results and the
// negative descriptors, refunded after the decision.
type descPlan struct {
	ms        []descMatch
	ops       []core.GroupOp
	asked     []int64             // what each op asks, when a Deny rule makes it a peek
	denied    []core.PolicyResult // of Deny rules, one per rule
	deniedIDs []string            // the identity of each of denied
	denies    bool                // a Deny rule (not a shadow) denies the request
	negatives []int
}

// descBuf is how many descriptors a call decides without allocating its
// plan: an Envoy request has a handful.
const descBuf = 8

// descriptors decides ds; with withIDs it also returns the identity of
// the counter of each of the Decision's results (for the observers).
func (e *Engine) descriptors(ctx context.Context, domain string, ds []Descriptor, withIDs bool) (DescriptorsResult, []string, error) {
	if err := validateDescriptors(domain, ds); err != nil {
		return DescriptorsResult{}, nil, err
	}
	st := e.cur.Load()
	var mbuf [descBuf]descMatch
	var obuf [descBuf]core.GroupOp
	res := DescriptorsResult{Allowed: true, Statuses: make([]DescriptorResult, len(ds))}
	p := e.planDescriptors(matchDescriptors(st, domain, ds, mbuf[:0]), ds, res.Statuses, obuf[:0])
	if err := decideDescriptors(ctx, st, &p, &res); err != nil {
		return DescriptorsResult{}, nil, err
	}
	for _, i := range p.negatives {
		pr, err := e.refund(ctx, st, p.ms[i].rule, p.ms[i].id, ds[i].Cost)
		if err != nil {
			return DescriptorsResult{}, nil, err
		}
		pr.Allowed, pr.RetryAfter = true, 0 // a refund is never denied (envoyproxy/ratelimit answers negative hits OK)
		res.Statuses[i].Result = pr
		if res.Degraded == core.FromStore && pr.Source.Degraded() {
			res.Degraded = pr.Source
		}
	}
	var ids []string
	if withIDs && len(res.Decision.Results) > 0 {
		ids = make([]string, 0, len(res.Decision.Results))
		for j := range p.ops {
			ids = append(ids, p.ops[j].Identity)
		}
		ids = append(ids, p.deniedIDs...)
	}
	return res, ids, nil
}

// planDescriptors returns the plan of the matches ms of ds, its ops
// appended to ops, and fills the statuses that need no store.
func (e *Engine) planDescriptors(ms []descMatch, ds []Descriptor, statuses []DescriptorResult, ops []core.GroupOp) descPlan {
	p := descPlan{ms: ms, ops: ops}
	var now time.Time
	for i := range p.ms {
		m := &p.ms[i]
		if m.rule == nil {
			continue
		}
		statuses[i].Rule = m.rule
		switch {
		case m.rule.Unlimited:
			statuses[i].Unlimited = true
		case m.rule.Deny: // no counter: denied now, whatever the cost
			if now.IsZero() {
				now = e.cfg.now()
			}
			statuses[i].Result = denial(m.rule, now)
			p.denies = p.denies || !m.rule.Shadow
			if !slices.ContainsFunc(p.denied, func(r core.PolicyResult) bool { return r.Policy == m.rule.ID }) {
				p.denied = append(p.denied, statuses[i].Result)
				p.deniedIDs = append(p.deniedIDs, m.id)
			}
		case ds[i].Negative:
			p.negatives = append(p.negatives, i)
		default:
			p.ops = addOp(p.ops, m, ds[i].Cost)
		}
	}
	if p.denies { // all or nothing: the others only peek
		p.asked = make([]int64, len(p.ops))
		for j := range p.ops {
			p.asked[j], p.ops[j].Cost = p.ops[j].Cost, 0
		}
	}
	return p
}

// decideDescriptors decides p's ops in one call and sets res's Decision,
// Allowed, Degraded and the status of each descriptor of a counter.
func decideDescriptors(ctx context.Context, st *state, p *descPlan, res *DescriptorsResult) error {
	res.Decision.Allowed = true
	if len(p.ops) > 0 {
		d, err := st.decide(ctx, p.ops, core.GroupCall{})
		if err != nil {
			return fmt.Errorf("engine: descriptors: %w", err)
		}
		refused := groupRefused(p.ops, d.Results)
		d.Allowed = !refused
		for i := range p.ms {
			j := p.ms[i].op
			if j < 0 {
				continue
			}
			cost := p.ops[j].Cost
			if p.asked != nil {
				cost = p.asked[j]
			}
			r := ownStatus(d.Results[j], cost, p.ms[i].upto, !refused && p.ops[j].Cost > 0 && d.Results[j].Allowed)
			res.Statuses[i].Result = r
			if !r.Allowed && !r.Shadow {
				d.Allowed = false
			}
		}
		res.Decision = d
	}
	withDenials(&res.Decision, p.denied, p.denies)
	res.Allowed, res.Degraded = res.Decision.Allowed, degraded(&res.Decision)
	return nil
}

// matchDescriptors appends to ms the rule each of ds reaches in domain,
// nil for one no rule matches and for one whose rule another matched rule
// of the request replaces.
func matchDescriptors(st *state, domain string, ds []Descriptor, ms []descMatch) []descMatch {
	var replaced map[string]bool
	for i := range ds {
		r, id, ok := st.snap.MatchDescriptor(domain, ds[i].Entries)
		ms = append(ms, descMatch{op: -1})
		if !ok {
			continue
		}
		ms[i].rule, ms[i].id = r, id
		for _, name := range r.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
	}
	for i := range ms {
		if ms[i].rule != nil && replaced[ms[i].rule.ID] {
			ms[i].rule = nil
		}
	}
	return ms
}

// addOp adds cost to the op of m's counter in ops (a new op if it has
// none yet), and records in m that op and the op's cost so far.
func addOp(ops []core.GroupOp, m *descMatch, cost int64) []core.GroupOp {
	for j := range ops { // descriptors are few: a scan beats a map
		if ops[j].Policy == m.rule.ID && ops[j].Identity == m.id {
			ops[j].Cost = addCost(ops[j].Cost, cost)
			m.op, m.upto = j, ops[j].Cost
			return ops
		}
	}
	m.op, m.upto = len(ops), cost
	return append(ops, core.GroupOp{Policy: m.rule.ID, Identity: m.id, Cost: cost})
}

// groupRefused reports whether the store counted nothing of a CheckGroup
// of ops: an op that takes (cost >= 1) and is not a shadow was denied. A
// denied peek refuses nothing (the store's all or nothing is over the
// takes).
func groupRefused(ops []core.GroupOp, rs []core.PolicyResult) bool {
	for j := range ops {
		if ops[j].Cost > 0 && !rs[j].Allowed && !rs[j].Shadow {
			return true
		}
	}
	return false
}

// ownStatus is the status of one descriptor of a counter whose op asked
// cost in all and was decided as p: upto is the cost of the counter's
// descriptors up to this one, itself included, and counted says whether
// the store took cost. Admitted, the descriptor reports the counter after
// upto (the hits up to it, in request order, as envoyproxy/ratelimit
// reports each); not counted, it is denied when upto exceeds what the
// counter has left, else allowed with what the counter has left. A
// decision of a guard's failure mode (fail open or closed) describes no
// counter: it is reported as it is.
func ownStatus(p core.PolicyResult, cost, upto int64, counted bool) core.PolicyResult {
	if p.Source == core.FailedOpen || p.Source == core.FailedClosed {
		return p
	}
	left := p.Remaining // after the take when counted, else before
	if counted {
		left = addCost(left, cost)
	}
	switch {
	case counted:
		p.Allowed, p.Remaining, p.RetryAfter = true, left-upto, 0
	case upto > left:
		p.Allowed, p.Remaining = false, 0
	default:
		p.Allowed, p.Remaining, p.RetryAfter = true, left, 0
	}
	return p
}

// refund gives cost hits back to rule's counter of identity as the refund
// of an admission made now (the instant a peek reads on the store's
// clock), and returns the counter's state after it.
func (e *Engine) refund(ctx context.Context, st *state, r *rules.Rule, identity string, cost int64) (core.PolicyResult, error) {
	op := []core.GroupOp{{Policy: r.ID, Identity: identity}}
	peek, err := st.decide(ctx, op, core.GroupCall{})
	if err != nil {
		return core.PolicyResult{}, fmt.Errorf("engine: negative hits: %w", err)
	}
	p := peek.Results[0]
	if cost == 0 || p.Source.Degraded() || p.Applied != nil && p.Override == 0 || p.At == 0 {
		return p, nil // nothing to give back, or no admission the store can name
	}
	a := core.Admission{Key: core.Key{Identity: identity, Policy: r.ID}, Limit: p.Limit, Cost: min(cost, p.Limit.Capacity()), At: p.At, Override: p.Override}
	if err := e.store.Refund(ctx, a); err != nil {
		return core.PolicyResult{}, fmt.Errorf("engine: negative hits: rule %q: %w", r.ID, err)
	}
	after, err := st.decide(ctx, op, core.GroupCall{})
	if err != nil {
		return core.PolicyResult{}, fmt.Errorf("engine: negative hits: %w", err)
	}
	return after.Results[0], nil
}
