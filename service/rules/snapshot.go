package rules

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/route"
	"github.com/sluicehq/sluice/internal/rulefile"
)

// Snapshot is an immutable, validated rule set: what a source loaded at one
// revision. It is safe for concurrent use; neither it nor the rules it
// returns may be changed.
type Snapshot struct {
	revision string
	loadedAt time.Time
	rules    []*Rule
	byID     map[string]*Rule
	native   map[nativeKey]*dimIndex
	tiers    map[string]map[string]string
	envoy    map[string]*envoyTree
	// overrides are as given to New; byOverride indexes them.
	overrides  []Override
	byOverride map[overrideKey]int
}

type nativeKey struct{ domain, dimension string }

// dimIndex holds the native rules of one domain and dimension.
type dimIndex struct {
	rules []*Rule    // in file order
	every []*Rule    // the rules without endpoint patterns, in file order
	trie  route.Trie // endpoint patterns, by index into rules
	// allEvery: no rule has endpoint patterns, so every endpoint matches
	// every rule (Match returns rules itself).
	allEvery bool
}

// envoyTree is one level of an Envoy domain's descriptor tree.
type envoyTree struct {
	byValue   map[Entry]*envoyTree // key and literal value
	byKey     map[string]*envoyTree
	wildcards []*envoyTree // in file order
	level     EnvoyLevel
	rule      *Rule
	// identity is the counter's identity of every descriptor reaching
	// rule, when no level of its path takes the descriptor's value (each
	// is a literal, or a wildcard with share_threshold); "" otherwise.
	identity string
}

// New builds a snapshot of rules (in the order given) at revision, with the
// tier assignments tiers (dimension -> identifier -> tier; nil for none).
// It checks what a parser checks of each rule, without file lines: valid
// and unique IDs (none Reserved), limits, tiers, endpoint patterns, Envoy paths unique per
// domain. Sources other than files (the rules database) build their
// snapshots with it. overrides are the temporary limits of single callers
// (Override); each must name a native rule of rules and its dimension, and
// errors name the field as overrides[i].field. Expired overrides may be
// given: the engine ignores them. New keeps rules, tiers and overrides: do
// not change them after.
func New(revision string, rules []*Rule, tiers map[string]map[string]string, overrides ...Override) (*Snapshot, error) {
	s := &Snapshot{
		revision: revision,
		loadedAt: time.Now(),
		rules:    rules,
		byID:     make(map[string]*Rule, len(rules)),
		native:   map[nativeKey]*dimIndex{},
		tiers:    tiers,
		envoy:    map[string]*envoyTree{},
	}
	var errs []error
	for i, r := range rules {
		if r == nil {
			errs = append(errs, fmt.Errorf("rules: rule %d: nil", i))
			continue
		}
		errs = s.addRule(errs, r)
	}
	for _, idx := range s.native {
		idx.allEvery = len(idx.every) == len(idx.rules)
	}
	errs = append(errs, tierAssignmentErrors(tiers)...)
	errs = append(errs, s.addOverrides(overrides)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// badField reports a bad field of a rule.
type badField func(field, format string, args ...any)

// addRule checks r and indexes it by ID and in its domain's Envoy tree
// or its dimension's native index; it returns errs with one error more
// per bad field.
func (s *Snapshot) addRule(errs []error, r *Rule) []error {
	bad := func(field, format string, args ...any) {
		fe := &core.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
		errs = append(errs, fmt.Errorf("rules: %s: %w", r.Source, &RuleError{ID: r.ID, Err: fe}))
	}
	s.addID(r, bad)
	checkLimits(r, bad)
	if r.Envoy != nil {
		if err := s.addEnvoy(r); err != nil {
			bad("descriptors", "%v", err)
		}
		return errs
	}
	if err := validDimension(r.Dimension); err != nil {
		bad("dimension", "%v", err)
		return errs
	}
	for _, p := range r.Endpoints {
		if err := route.Validate(p); err != nil {
			bad(rulefile.FieldEndpointPattern, "%v", err)
		}
	}
	s.addNative(r)
	return errs
}

// addID indexes r by its ID: a valid rule name, not reserved, not taken.
func (s *Snapshot) addID(r *Rule, bad badField) {
	if err := core.ValidatePolicyName(r.ID); err != nil {
		bad("name", "%s", message(err))
	} else if Reserved(r.ID) {
		bad("name", "%q is reserved: ratelimitd counts the admin API's per-token limits under it", r.ID)
	} else if prev, dup := s.byID[r.ID]; dup {
		bad("name", "duplicate rule name (first at %s)", prev.Source)
	} else {
		s.byID[r.ID] = r
	}
}

// checkLimits checks r's limit and its tiers' against what r is
// (unlimited, deny or limited).
func checkLimits(r *Rule, bad badField) {
	switch {
	case r.Unlimited && r.Deny:
		bad("unlimited", "a rule cannot be both unlimited and deny")
	case r.Unlimited:
		if r.Limit != (core.Limit{}) || len(r.Tiers) > 0 {
			bad("unlimited", "an unlimited rule has no limit")
		}
	case r.Deny:
		if r.Limit.Rate != 0 || len(r.Tiers) > 0 {
			bad("deny", "a deny rule has rate 0 and no tiers")
		}
	default:
		if err := r.Limit.Validate(); err != nil {
			fe := limitField(err, "")
			bad(fe.Field, "%s", fe.Message)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Tiers)) {
		if strings.TrimSpace(name) == "" {
			bad("tiers", "a tier needs a name")
		} else if err := r.Tiers[name].Validate(); err != nil {
			fe := limitField(err, "tiers."+name)
			bad(fe.Field, "%s", fe.Message)
		}
	}
	checkLease(r, bad)
}

// checkLease checks r's Lease against its limit and its tiers' (a sliding
// window log cannot be leased), and that a rule counting nothing has none.
func checkLease(r *Rule, bad badField) {
	if r.Lease == 0 {
		return
	}
	if r.Unlimited || r.Deny {
		bad(rulefile.FieldLeaseSeconds, "a rule that counts nothing has no lease")
		return
	}
	for _, l := range append([]core.Limit{r.Limit}, slices.Collect(maps.Values(r.Tiers))...) {
		if err := core.ValidateLease(r.Lease, l); err != nil {
			bad(rulefile.FieldLeaseSeconds, "%s", message(err))
			return
		}
	}
}

// addNative adds the native rule r to its domain's and dimension's index:
// under each of its endpoint patterns, or every endpoint when it has none.
func (s *Snapshot) addNative(r *Rule) {
	k := nativeKey{r.Domain, r.Dimension}
	idx := s.native[k]
	if idx == nil {
		idx = &dimIndex{}
		s.native[k] = idx
	}
	n := len(idx.rules)
	idx.rules = append(idx.rules, r)
	if len(r.Endpoints) == 0 {
		idx.every = append(idx.every, r)
		idx.trie.InsertAll(n)
	}
	for _, p := range r.Endpoints {
		idx.trie.Insert(p, n)
	}
}

// tierAssignmentErrors checks tiers (dimension -> identifier -> tier):
// valid dimensions, no empty tier.
func tierAssignmentErrors(tiers map[string]map[string]string) []error {
	var errs []error
	for _, dim := range slices.Sorted(maps.Keys(tiers)) {
		if err := validDimension(dim); err != nil {
			errs = append(errs, fmt.Errorf("rules: %w", &core.FieldError{Field: "tier_assignments." + dim, Message: err.Error()}))
		}
		for id, tier := range tiers[dim] {
			if tier == "" {
				errs = append(errs, fmt.Errorf("rules: %w", &core.FieldError{Field: "tier_assignments." + dim + "." + id, Message: "empty tier"}))
			}
		}
	}
	return errs
}

// validDimension reports why d cannot name a dimension: 1 to 64 of
// a-z A-Z 0-9 _ . : -, as a rule name.
func validDimension(d string) error {
	if d == "" {
		return errors.New("required (user, ip, api_key or any name)")
	}
	if len(d) > 64 {
		return fmt.Errorf("must be at most 64 characters, got %d", len(d))
	}
	for i := 0; i < len(d); i++ {
		c := d[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return fmt.Errorf("only a-z A-Z 0-9 _ . : - allowed, got %q", d)
		}
	}
	return nil
}

// addEnvoy places r in its domain's descriptor tree.
func (s *Snapshot) addEnvoy(r *Rule) error {
	if len(r.Envoy.Path) == 0 {
		return errors.New("an Envoy rule needs a descriptor path")
	}
	t := s.envoy[r.Domain]
	if t == nil {
		t = &envoyTree{}
		s.envoy[r.Domain] = t
	}
	for _, l := range r.Envoy.Path {
		if l.Key == "" {
			return errors.New("descriptor has empty key")
		}
		t = t.child(l)
	}
	if t.rule != nil {
		return fmt.Errorf("duplicate descriptor %s (rule %q at %s)", pathString(r.Domain, r.Envoy.Path), t.rule.ID, t.rule.Source)
	}
	t.rule = r
	t.identity = constantIdentity(r.Domain, r.Envoy.Path)
	return nil
}

// constantIdentity is the identity of every descriptor reaching path in
// domain when none of its levels takes the descriptor's value, else "".
func constantIdentity(domain string, path []EnvoyLevel) string {
	entries := make([]Entry, len(path))
	for i, l := range path {
		if l.Value == "" || l.wildcard() && !l.ShareThreshold {
			return ""
		}
		entries[i] = Entry{Key: l.Key, Value: l.Value}
	}
	return identityOf(domain, entries, path)
}

// child returns the node of level l under t, creating it.
func (t *envoyTree) child(l EnvoyLevel) *envoyTree {
	switch {
	case l.Value == "":
		if c := t.byKey[l.Key]; c != nil {
			return c
		}
		if t.byKey == nil {
			t.byKey = map[string]*envoyTree{}
		}
		c := &envoyTree{level: l}
		t.byKey[l.Key] = c
		return c
	case l.wildcard():
		for _, c := range t.wildcards {
			if c.level.Key == l.Key && c.level.Value == l.Value {
				return c
			}
		}
		c := &envoyTree{level: l}
		t.wildcards = append(t.wildcards, c)
		return c
	default:
		e := Entry{l.Key, l.Value}
		if c := t.byValue[e]; c != nil {
			return c
		}
		if t.byValue == nil {
			t.byValue = map[Entry]*envoyTree{}
		}
		c := &envoyTree{level: l}
		t.byValue[e] = c
		return c
	}
}

// pathString formats an Envoy path as EN names it: domain.key_value.key.
func pathString(domain string, path []EnvoyLevel) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, l := range path {
		b.WriteByte('.')
		b.WriteString(l.Key)
		if l.Value != "" {
			b.WriteByte('_')
			b.WriteString(l.Value)
		}
	}
	return b.String()
}

// Revision identifies the snapshot's content: the first 12 hex digits of
// the SHA-256 of a file's bytes, or a database revision. It is shown in
// health and metrics.
func (s *Snapshot) Revision() string { return s.revision }

// LoadedAt is when the snapshot was built.
func (s *Snapshot) LoadedAt() time.Time { return s.loadedAt }

// Rules returns every rule, in file order. The slice is shared: do not
// change it.
func (s *Snapshot) Rules() []*Rule { return s.rules }

// Rule returns the rule named id.
func (s *Snapshot) Rule(id string) (*Rule, bool) {
	r, ok := s.byID[id]
	return r, ok
}

// Match returns the native rules of domain ("" for rules without domain:)
// that apply to a check of dimension on endpoint, in file order: the rules
// of that dimension whose endpoint patterns match endpoint, or that have
// none. An empty endpoint matches only the rules without patterns. The
// result may be shared between calls: do not change it.
func (s *Snapshot) Match(domain, dimension, endpoint string) []*Rule {
	idx := s.native[nativeKey{domain, dimension}]
	switch {
	case idx == nil:
		return nil
	case idx.allEvery:
		return idx.rules
	case endpoint == "":
		return idx.every
	}
	return idx.appendMatch(nil, endpoint)
}

// AppendMatch appends the rules Match returns to dst and returns the
// extended slice: a caller that passes a buffer of its own (an array on
// its stack) matches without allocating while the rules fit in it.
func (s *Snapshot) AppendMatch(dst []*Rule, domain, dimension, endpoint string) []*Rule {
	idx := s.native[nativeKey{domain, dimension}]
	switch {
	case idx == nil:
		return dst
	case idx.allEvery:
		return append(dst, idx.rules...)
	case endpoint == "":
		return append(dst, idx.every...)
	}
	return idx.appendMatch(dst, endpoint)
}

// appendMatch appends the rules whose patterns match endpoint (or that
// have none) to dst, in file order.
func (idx *dimIndex) appendMatch(dst []*Rule, endpoint string) []*Rule {
	// The indices the trie reports (once per matching pattern of a rule),
	// sorted and deduplicated: the cost follows the matches, not the number
	// of rules of the dimension.
	var small [16]int
	found := small[:0]
	idx.trie.Match(endpoint, func(i int) { found = append(found, i) })
	if len(found) == 0 {
		return dst
	}
	slices.Sort(found)
	found = slices.Compact(found)
	dst = slices.Grow(dst, len(found))
	for _, i := range found {
		dst = append(dst, idx.rules[i])
	}
	return dst
}

// MatchDescriptor returns the Envoy rule that a request descriptor's
// entries reach in domain, as envoyproxy/ratelimit finds it: at each level
// the entry's key and value first, then the level's wildcard values in file
// order (foo* matches any value starting with foo), then the key alone; the
// rule must be on the level of the last entry (the request's depth equals
// the config's). identity names the counter: the domain and every entry's
// key and value, escaped and joined unambiguously, with the wildcard
// pattern instead of the value on levels with share_threshold. ok is false
// when no rule applies.
func (s *Snapshot) MatchDescriptor(domain string, entries []Entry) (r *Rule, identity string, ok bool) {
	t := s.envoy[domain]
	if t == nil || len(entries) == 0 {
		return nil, "", false
	}
	for _, e := range entries {
		next := t.byValue[e]
		if next == nil {
			for _, w := range t.wildcards {
				if w.level.Key == e.Key && strings.HasPrefix(e.Value, w.level.Value[:len(w.level.Value)-1]) {
					next = w
					break
				}
			}
		}
		if next == nil {
			next = t.byKey[e.Key]
		}
		if next == nil {
			return nil, "", false
		}
		t = next
	}
	switch {
	case t.rule == nil:
		return nil, "", false
	case t.identity != "":
		return t.rule, t.identity, true
	}
	return t.rule, identityOf(domain, entries, t.rule.Envoy.Path), true
}

// identityOf joins domain and the entries as domain|key=value|key=value,
// escaping \ | and = with a backslash, so distinct descriptors never share
// an identity.
func identityOf(domain string, entries []Entry, path []EnvoyLevel) string {
	var b strings.Builder
	n := len(domain)
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	b.Grow(n + 8)
	escapeTo(&b, domain)
	for i, e := range entries {
		b.WriteByte('|')
		escapeTo(&b, e.Key)
		b.WriteByte('=')
		if l := path[i]; l.ShareThreshold && l.wildcard() {
			escapeTo(&b, l.Value)
		} else {
			escapeTo(&b, e.Value)
		}
	}
	return b.String()
}

func escapeTo(b *strings.Builder, s string) {
	i := 0
	for i < len(s) && s[i] != '\\' && s[i] != '|' && s[i] != '=' {
		i++
	}
	b.WriteString(s[:i]) // the longest prefix without one to escape (usually all of s)
	for ; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '|' || c == '=' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
}

// TierOf returns the tier of identifier in dimension, "" when it has none
// (the rules' default limits apply).
func (s *Snapshot) TierOf(dimension, identifier string) string {
	return s.tiers[dimension][identifier]
}

// tierNames lists the tiers the rules of dimension define, sorted.
func (s *Snapshot) tierNames(dimension string) []string {
	set := map[string]bool{}
	for k, idx := range s.native {
		if k.dimension != dimension {
			continue
		}
		for _, r := range idx.rules {
			for t := range r.Tiers {
				set[t] = true
			}
		}
	}
	out := slices.Collect(maps.Keys(set))
	sort.Strings(out)
	return out
}
