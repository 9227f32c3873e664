package rulesdb

import (
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// Rule is one stored rule, in the admin API's JSON shape.
//
// Rows with a Tier give the limit for callers of that tier: they are folded
// into the enabled row without a tier of the same Dimension and
// EndpointPattern (which must exist). Disabled rows are stored but not
// served.
type Rule struct {
	// ID names the rule and its counters: 1 to 64 of a-z A-Z 0-9 _ . : -.
	ID string `json:"id"`
	// Name is a free-text label.
	Name string `json:"name"`
	// Dimension is what the caller's identifier is: user, ip, api_key, ...
	Dimension string `json:"dimension"`
	// EndpointPattern is a route pattern ("/api/**"); empty matches every
	// endpoint.
	EndpointPattern string `json:"endpoint_pattern"`
	// Limit is the number of requests per window.
	Limit int64 `json:"limit"`
	// WindowSeconds is the window (period) in seconds.
	WindowSeconds int64 `json:"window_seconds"`
	// Algorithm is one of core.AlgorithmNames (token_bucket, leaky_bucket,
	// fixed_window, sliding_window_log, sliding_window_counter, gcra).
	Algorithm string `json:"algorithm"`
	// Tier is "" for the base limit, else the tier this row's limit is for.
	Tier string `json:"tier"`
	// Burst is the capacity of the bucket algorithms (0: Limit).
	Burst int64 `json:"burst"`
	// Shadow rules count and report but never deny.
	Shadow bool `json:"shadow"`
	// LeaseSeconds, when positive, is the rule's lease (rules.Rule.Lease,
	// core.Policy.Lease): the rule is decided in memory from blocks of
	// units taken from the store, each held at most this long, to the
	// microsecond. 0: none. Set on the row without a tier: a tier row
	// takes its rule's.
	LeaseSeconds float64 `json:"lease_seconds"`
	// Enabled rules are served; disabled ones are kept but ignored.
	Enabled bool `json:"enabled"`
	// ETag is the revision of the rule's last write (set by the store).
	ETag string `json:"etag,omitempty"`
	// Revision is the database revision of the rule's last write.
	Revision int64 `json:"revision,omitempty"`
	// CreatedAt and UpdatedAt are set by the store.
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// limit returns the rule's core.Limit, or an error naming the field.
func (r *Rule) limit() (core.Limit, error) {
	a, err := core.ParseAlgorithm(r.Algorithm)
	if err != nil {
		return core.Limit{}, ruleError(r.ID, LimitField(err))
	}
	if r.WindowSeconds < 1 || r.WindowSeconds > int64(100*365*24*time.Hour/time.Second) {
		return core.Limit{}, invalidRule(r.ID, "window_seconds", "must be at least 1 (and at most 100 years), got %d", r.WindowSeconds)
	}
	l := core.Limit{Algorithm: a, Rate: r.Limit, Period: time.Duration(r.WindowSeconds) * time.Second, Burst: r.Burst}
	if err := l.Validate(); err != nil {
		return core.Limit{}, ruleError(r.ID, LimitField(err))
	}
	return l, nil
}

// maxLeaseSeconds bounds a lease as a window is bounded (100 years).
const maxLeaseSeconds = 100 * 365 * 24 * 60 * 60

// lease returns the rule's lease, or an error naming the field.
func (r *Rule) lease() (time.Duration, error) {
	if s := r.LeaseSeconds; !(s >= 0 && s <= maxLeaseSeconds) {
		return 0, invalidRule(r.ID, "lease_seconds", "must be 0 (none) to %d seconds, got %v", maxLeaseSeconds, s)
	}
	return time.Duration(r.leaseUS()) * time.Microsecond, nil
}

// leaseUS is the rule's lease in whole microseconds, as stored.
func (r *Rule) leaseUS() int64 {
	if !(r.LeaseSeconds > 0 && r.LeaseSeconds <= maxLeaseSeconds) {
		return 0
	}
	return int64(math.Round(r.LeaseSeconds * 1e6))
}

func etagOf(rev int64) string { return `"` + strconv.FormatInt(rev, 10) + `"` }

// snapshot builds the validated snapshot of rows (ordered by id) and tier
// assignments at revision rev: the engine's view of the database. The
// error names the rule and field.
func snapshot(rev int64, rows []*Rule, tiers map[string]map[string]string) (*rules.Snapshot, error) {
	s, _, err := snapshotAt(strconv.FormatInt(rev, 10), rows, tiers, nil, time.Time{})
	return s, err
}

// snapshotAt is snapshot with a revision string and the stored overrides:
// those in force at now of a served rule of their dimension go into the
// snapshot (their limit with the rule's algorithm), and so do the
// tombstones of those cleared before their expiry (lapsed: see
// Override.ClearedAt); the others are left out, the ones that no longer
// fit their rule (a disabled or tiered rule, a changed dimension or
// algorithm) each with an error in skipped.
func snapshotAt(revision string, rows []*Rule, tiers map[string]map[string]string, ovs []Override, now time.Time) (snap *rules.Snapshot, skipped []error, err error) {
	out, base, errs := baseRules(rows)
	errs = addTierRows(errs, rows, base)
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	in, skipped := overridesInForce(ovs, out, now)
	s, err := rules.New(revision, out, tiers, in...)
	if err != nil {
		return nil, skipped, fromSnapshot(err)
	}
	return s, skipped, nil
}

// baseKey is what no two enabled rows without a tier share: their
// dimension and endpoint pattern.
type baseKey struct{ dim, ep string }

// baseRules turns the enabled rows without a tier into rules, in order,
// indexed by baseKey; errs has one error per row refused.
func baseRules(rows []*Rule) (out []*rules.Rule, base map[baseKey]*rules.Rule, errs []error) {
	base = map[baseKey]*rules.Rule{}
	for _, r := range rows {
		if !r.Enabled || r.Tier != "" {
			continue
		}
		l, err := r.limit()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lease, err := r.lease()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rr := &rules.Rule{ID: r.ID, Dimension: r.Dimension, Limit: l, Shadow: r.Shadow, Lease: lease, Source: rules.Position{File: "db:rules/" + r.ID}}
		if r.EndpointPattern != "" {
			rr.Endpoints = []string{r.EndpointPattern}
		}
		k := baseKey{r.Dimension, r.EndpointPattern}
		if prev, dup := base[k]; dup {
			errs = append(errs, invalidRule(r.ID, "endpoint_pattern", "rule %q already has dimension %q and endpoint_pattern %q without a tier", prev.ID, r.Dimension, r.EndpointPattern))
			continue
		}
		base[k] = rr
		out = append(out, rr)
	}
	return out, base, errs
}

// addTierRows adds the limit of each enabled tier row to the tiers of its
// base rule; it returns errs with one error more per row refused.
func addTierRows(errs []error, rows []*Rule, base map[baseKey]*rules.Rule) []error {
	for _, r := range rows {
		if !r.Enabled || r.Tier == "" {
			continue
		}
		l, err := r.limit()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b := base[baseKey{r.Dimension, r.EndpointPattern}]
		switch {
		case r.LeaseSeconds != 0:
			errs = append(errs, invalidRule(r.ID, "lease_seconds", "a tier row takes its rule's lease: set lease_seconds on the row without a tier"))
		case b == nil:
			errs = append(errs, invalidRule(r.ID, "tier", "no enabled rule without a tier has dimension %q and endpoint_pattern %q", r.Dimension, r.EndpointPattern))
		case b.Tiers[r.Tier] != (core.Limit{}):
			errs = append(errs, invalidRule(r.ID, "tier", "tier %q of dimension %q and endpoint_pattern %q is given twice", r.Tier, r.Dimension, r.EndpointPattern))
		default:
			if b.Tiers == nil {
				b.Tiers = map[string]core.Limit{}
			}
			b.Tiers[r.Tier] = l
		}
	}
	return errs
}

// overridesInForce returns the overrides of ovs not expired at now that
// fit their rule of out, as the snapshot takes them, with the tombstones;
// skipped has an error for each other one not expired.
func overridesInForce(ovs []Override, out []*rules.Rule, now time.Time) (in []rules.Override, skipped []error) {
	byID := make(map[string]*rules.Rule, len(out))
	for _, r := range out {
		byID[r.ID] = r
	}
	for _, o := range ovs {
		if !o.ExpiresAt.After(now) {
			continue
		}
		ro, ok, err := o.toRules(byID[o.RuleID], now)
		if err != nil {
			skipped = append(skipped, err)
		}
		if ok {
			in = append(in, ro)
		}
	}
	return in, skipped
}
