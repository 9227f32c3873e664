package core

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/route"
	"github.com/sluicehq/sluice/keyfunc"
)

// Policy is one limit on requests: the identity it counts by, and how many.
type Policy struct {
	// Name identifies the policy in headers, metrics and keys: 1 to 64 of
	// a-z A-Z 0-9 _ . : - , unique within a Limiter.
	Name string
	// Key returns the identity a request is counted under, for example
	// keyfunc.IP() or keyfunc.Header("X-API-Key"). Required. An error, an
	// empty key or a panic affects only this policy: see MissingKey. Key
	// is called for every request the policy matches, concurrently.
	Key keyfunc.Func
	// Limit is how many requests an identity may make.
	Limit Limit
	// Match selects the requests the policy applies to (all by default).
	Match Match
	// Tiers, if set, replaces Limit for callers whose tier (see WithTiering)
	// has an entry; other callers get Limit.
	Tiers map[string]Limit
	// Shadow puts the policy on trial: a request it would deny is allowed,
	// and its result is marked and reported to OnShadowDeny hooks.
	Shadow bool
	// Refund gives a request's units back after the response, when the
	// response matches: RefundFailed (status >= 400) or RefundSuccessful.
	Refund RefundWhen
	// MissingKey says what a request gets when Key finds no identity for it
	// (ErrNoKey, an empty key, any other error, or a panic): SkipPolicy (the
	// default) decides the request under the other policies only;
	// DenyRequest denies it.
	MissingKey MissingKey
	// Lease, when positive, lets each instance decide the policy in
	// memory from blocks of units it takes from the shared store in one
	// call and holds at most Lease (a few hundred milliseconds, say): a
	// hot identity or a fleet-wide limit then costs the store one call
	// per block instead of one per request, and the store never admits
	// more than Limit. It takes effect when the Limiter's store is a
	// lease layer (package core/lease); every other store decides each
	// request exactly, as with no Lease. A sliding_window_log cannot be
	// leased (each entry's own instant counts): NewLimiter refuses it.
	// Zero, the default, decides every request in the store.
	Lease time.Duration
}

// MissingKey says what a policy does with a request it has no identity for.
type MissingKey uint8

const (
	// SkipPolicy leaves the policy out of the request's decision (the
	// default): the other policies still apply, and Decision.Skipped names
	// it. A request that every matching policy skips cannot be decided:
	// Check returns the key error.
	SkipPolicy MissingKey = iota
	// DenyRequest denies the request: its PolicyResult is Unidentified,
	// denied with RetryAfter RetryNever (no wait helps; an identity does),
	// and the other policies count nothing.
	DenyRequest
)

// String returns "skip" or "deny".
func (m MissingKey) String() string {
	switch m {
	case SkipPolicy:
		return "skip"
	case DenyRequest:
		return "deny"
	}
	return fmt.Sprintf("MissingKey(%d)", uint8(m))
}

// RefundWhen says which responses a policy does not count.
type RefundWhen uint8

const (
	// RefundNever counts every admitted request (the default).
	RefundNever RefundWhen = iota
	// RefundFailed gives back requests answered with status >= 400.
	RefundFailed
	// RefundSuccessful gives back requests answered with status < 400.
	RefundSuccessful
)

func (w RefundWhen) matches(status int) bool {
	return w == RefundFailed && status >= 400 || w == RefundSuccessful && status < 400
}

// policySet is an immutable set of compiled policies; SetPolicies swaps it
// atomically, so a reload never drops or blocks a request.
type policySet struct {
	policies []compiledPolicy
	byName   map[string]int // index in policies, by Name (CheckGroup)
	routes   route.Trie
	// everyRequest: every policy applies to every request (no routes, no
	// methods), so no matching is needed.
	everyRequest bool
}

type compiledPolicy struct {
	Policy
	methods []string          // Match.Methods; nil when any method matches ("*")
	tiers   map[string]*Limit // Tiers, by pointer: a Decision points at its limit
	name    []string          // {Name}, full: Decision.Skipped of this policy alone
}

// ValidateMethod reports why m cannot be one of Match.Methods, as a
// *FieldError of field "Methods" (nil if it can be): it must be an
// RFC 9110 method token (GET, POST, PROPFIND, ...) written in one case, or
// "*" for any method. "ANY" and "ALL" are refused as the mistakes they
// usually are (write "*", or leave Methods empty), as are lists such as
// "GET,POST" or "GET POST" (give each method its own entry). NewLimiter
// checks every method of every policy; a program that reads policies from
// a format of its own (package config, ratelimitd's rules) calls it to
// refuse a bad method where it was written.
func ValidateMethod(m string) error {
	bad := func(format string, args ...any) error {
		return invalidField(nil, "Methods", format, args...)
	}
	if m == "*" {
		return nil
	}
	if m == "" {
		return bad("an empty method")
	}
	for i := 0; i < len(m); i++ {
		if !tchar(m[i]) {
			return bad("%q is not a method token (one method per entry; \"*\" for any)", m)
		}
	}
	if strings.ToUpper(m) != m && strings.ToLower(m) != m {
		return bad("%q mixes cases", m)
	}
	if strings.EqualFold(m, "ANY") || strings.EqualFold(m, "ALL") {
		return bad("%q is not a method (\"*\" or no Methods at all match every method)", m)
	}
	return nil
}

// tchar reports whether c may appear in an RFC 9110 token.
func tchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// compilePolicies validates policies (under the Limiter's configuration c)
// and compiles them into a set: route trie, method lists and store-key
// suffixes.
func compilePolicies(policies []Policy, c *limiterConfig) (*policySet, error) {
	if len(policies) == 0 {
		return nil, errors.New("sluice: no policies")
	}
	set := &policySet{byName: make(map[string]int, len(policies)), policies: make([]compiledPolicy, 0, len(policies))}
	for i, p := range policies {
		if err := ValidatePolicyName(p.Name); err != nil {
			return nil, fmt.Errorf("sluice: policy %d: %w", i, err)
		}
		if _, dup := set.byName[p.Name]; dup {
			return nil, fmt.Errorf("sluice: policy %q: %w", p.Name, invalidField(nil, "Name", "duplicate"))
		}
		if err := validatePolicy(&p, c); err != nil {
			return nil, fmt.Errorf("sluice: policy %q: %w", p.Name, err)
		}
		set.byName[p.Name] = i
		if len(p.Match.Routes) == 0 {
			set.routes.InsertAll(i)
		}
		for _, pattern := range p.Match.Routes {
			set.routes.Insert(pattern, i)
		}
		anyMethod := slices.Contains(p.Match.Methods, "*")
		p.Shadow = p.Shadow || c.shadow
		set.policies = append(set.policies, compilePolicy(p, anyMethod))
	}
	set.everyRequest = set.routes.NumAll() == len(set.policies) && !set.anyMethods()
	return set, nil
}

// compilePolicy compiles p, validated: its tiers' limits by pointer, and
// its methods unless one of them is "*" (anyMethod).
func compilePolicy(p Policy, anyMethod bool) compiledPolicy {
	cp := compiledPolicy{Policy: p, name: []string{p.Name}}
	if len(p.Tiers) > 0 {
		cp.tiers = make(map[string]*Limit, len(p.Tiers))
		for tier, tl := range p.Tiers {
			cp.tiers[tier] = &tl
		}
	}
	if !anyMethod {
		cp.methods = p.Match.Methods
	}
	return cp
}

// validatePolicy reports the first field of p (its Name valid) that cannot
// be used under the Limiter's configuration c, as a *FieldError whose path
// starts at the Policy ("Limit.Rate", `Tiers["gold"].Period`,
// "Match.Routes[1]"), or nil.
func validatePolicy(p *Policy, c *limiterConfig) error {
	if p.Key == nil {
		return invalidField(nil, "Key", "required (for example keyfunc.IP)")
	}
	if fe := p.Limit.check(); fe != nil {
		return limitIn("Limit", fe, p.Limit)
	}
	if err := ValidateLease(p.Lease, p.Limit); err != nil {
		return err
	}
	if p.MissingKey > DenyRequest {
		return invalidField(nil, "MissingKey", "must be SkipPolicy or DenyRequest, got %d", p.MissingKey)
	}
	for _, tier := range slices.Sorted(maps.Keys(p.Tiers)) {
		if tier == "" {
			return invalidField(nil, "Tiers", "a tier named \"\" (callers without a tier get Limit)")
		}
		if fe := p.Tiers[tier].check(); fe != nil {
			return limitIn(fmt.Sprintf("Tiers[%q]", tier), fe, p.Tiers[tier])
		}
		if err := ValidateLease(p.Lease, p.Tiers[tier]); err != nil {
			return fmt.Errorf("tier %q: %w", tier, err)
		}
	}
	if len(p.Tiers) > 0 && c.tiering == nil {
		return invalidField(nil, "Tiers", "set, but the Limiter has no WithTiering")
	}
	for i, pattern := range p.Match.Routes {
		if err := route.Validate(pattern); err != nil {
			return invalidField(nil, fmt.Sprintf("Match.Routes[%d]", i), "%v", err)
		}
	}
	for i, m := range p.Match.Methods {
		var fe *FieldError
		if errors.As(ValidateMethod(m), &fe) {
			return &FieldError{Field: fmt.Sprintf("Match.Methods[%d]", i), Message: fe.Message}
		}
	}
	return nil
}

// limitIn is the error of an invalid limit l of a larger value, at path:
// fe nested under it, the text adding the whole limit.
func limitIn(path string, fe *FieldError, l Limit) error {
	return fmt.Errorf("%w (limit %s)", fe.In(path), l)
}

// matched returns the indices of the policies of set that apply to r, in
// order. Its cost follows the policies that match r's path (the trie walks
// the path's segments), never the number of policies in the set: a set of
// 100,000 routed policies decides as fast as one of ten.
func (set *policySet) matched(r keyfunc.Request) []int {
	out := make([]int, 0, 8)
	set.routes.Match(r.Path(), func(i int) { out = append(out, i) })
	if len(out) == 0 {
		return out
	}
	// The trie reports an index once per pattern of its policy that matches:
	// sorted and deduplicated, the policies are in order, each once.
	slices.Sort(out)
	out = slices.Compact(out)
	method := ""
	kept := out[:0]
	for _, i := range out {
		if ms := set.policies[i].methods; len(ms) > 0 {
			if method == "" {
				method = r.Method()
			}
			if !slices.ContainsFunc(ms, func(m string) bool { return strings.EqualFold(m, method) }) {
				continue
			}
		}
		kept = append(kept, i)
	}
	return kept
}

// ValidateLease reports why a policy of limit l cannot have Lease lease
// (see Policy.Lease): nil, or a *FieldError of field "Lease". A negative Lease
// is refused, and so is any lease of a sliding_window_log: its every
// admission counts at its own instant until that instant leaves the
// window, so units taken at one instant and spent later would be counted
// at the wrong instants, and admitted past the limit. NewLimiter checks
// every policy's Lease; a program that reads policies from a format of its
// own calls it to refuse a bad lease where it was written.
func ValidateLease(lease time.Duration, l Limit) error {
	switch {
	case lease < 0:
		return invalidField(nil, "Lease", "must not be negative, got %s", lease)
	case lease > 0 && l.Algorithm == SlidingWindowLog:
		return invalidField(nil, "Lease", "%s cannot be leased: each admission counts at its own instant, which a block of units taken at once cannot keep (use sliding_window_counter or fixed_window)", l.Algorithm)
	}
	return nil
}

// ValidatePolicyName reports why name cannot name a policy, as a
// *FieldError of field "Name" (nil if it can). NewLimiter checks every
// policy's name; a program that takes policy names from its users (a
// rules file, an admin API naming the policy of an override) calls it to
// refuse a bad name where it was written.
func ValidatePolicyName(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return invalidField(nil, "Name", "must be 1 to 64 characters, got %q", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return invalidField(nil, "Name", "only a-z A-Z 0-9 _ . : - allowed, got %q", name)
		}
	}
	return nil
}

// firstIdx lists 0..63, so allIdx needs no allocation for small sets.
var firstIdx = func() (a [64]int) {
	for i := range a {
		a[i] = i
	}
	return a
}()

func (set *policySet) allIdx() []int {
	if len(set.policies) <= len(firstIdx) {
		return firstIdx[:len(set.policies)]
	}
	idx := make([]int, len(set.policies))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func (set *policySet) anyMethods() bool {
	for i := range set.policies {
		if len(set.policies[i].methods) > 0 {
			return true
		}
	}
	return false
}

func (set *policySet) anyTiers(idx []int) bool {
	for _, i := range idx {
		if len(set.policies[i].Tiers) > 0 {
			return true
		}
	}
	return false
}

// identity returns the identity of a request under p (its store key is
// Key{Identity: identity, Policy: p.Name}). A key function that panics is
// a key error: one bad request must not bring the process down.
func (p *compiledPolicy) identity(r keyfunc.Request, override keyfunc.Func) (string, error) {
	f := p.Key
	if override != nil {
		f = override
	}
	id, err := callKey(f, r)
	if err == nil && id == "" {
		err = ErrNoKey
	}
	if err != nil { // wrapped by the caller, only if it returns it
		return "", err
	}
	return id, nil
}

// callKey calls f, turning a panic into an error.
func callKey(f keyfunc.Func, r keyfunc.Request) (id string, err error) {
	defer func() {
		if v := recover(); v != nil {
			id, err = "", fmt.Errorf("key function panicked: %v", v)
		}
	}()
	return f(r)
}
