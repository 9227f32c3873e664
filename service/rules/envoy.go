package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/core"
)

// Envoy's rate-limit units, as envoyproxy/ratelimit divides time: a month is
// 30 days and a year 365, windows aligned on the Unix epoch.
var envoyUnits = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

const envoyUnitNames = "second, minute, hour, day, week, month, year"

var (
	envoyTopFields        = []string{"domain", "descriptors"}
	envoyDescriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold"}
	envoyRateLimitFields  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst"}
)

// envoyFile reads a file of envoyproxy/ratelimit's format: one domain and
// its descriptor tree. Rule IDs are assigned later (assignEnvoyIDs), once
// every rule of the set is known; until then a rule's Replaces holds
// names.
func (p *parser) envoyFile(doc *yaml.Node) (string, []*Rule) {
	f := p.fields(doc, "", envoyTopFields...)
	if f == nil {
		return "", nil
	}
	domain := ""
	if v := f["domain"]; v == nil {
		p.fail(doc, "domain", "required: the config file cannot have an empty domain")
	} else if s, ok := p.str(v, "domain"); ok {
		if s == "" {
			p.fail(v, "domain", "required: the config file cannot have an empty domain")
		}
		domain = s
	}
	var out []*Rule
	if v := f["descriptors"]; v != nil {
		p.envoyDescriptors(v, "descriptors", domain, nil, &out)
	}
	if len(out) > p.maxRules {
		p.fail(doc, "descriptors", "%d rules, more than the limit of %d (see WithMaxRules)", len(out), p.maxRules)
		return domain, nil
	}
	return domain, out
}

// envoyDescriptors reads one level of descriptors under path.
func (p *parser) envoyDescriptors(list *yaml.Node, field, domain string, parent []EnvoyLevel, out *[]*Rule) {
	if isNull(list) {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.fail(list, field, "must be a list of descriptors")
		return
	}
	seen := map[string]int{} // EN's composite key: key or key_value
	for i, dn := range list.Content {
		p.envoyDescriptor(dn, fmt.Sprintf("%s[%d]", field, i), domain, parent, seen, out)
	}
}

// envoyDescriptor reads the descriptor dn at path under parent, its rule
// into out and the levels under it; seen holds the line of each
// composite key of dn's level so far.
func (p *parser) envoyDescriptor(dn *yaml.Node, path, domain string, parent []EnvoyLevel, seen map[string]int, out *[]*Rule) {
	f := p.fields(dn, path, envoyDescriptorFields...)
	if f == nil {
		return
	}
	l, ok := p.envoyKeyValue(dn, f, path)
	if !ok {
		return
	}
	composite := l.Key
	if l.Value != "" {
		composite += "_" + l.Value
	}
	if line, dup := seen[composite]; dup {
		p.fail(dn, path, "duplicate descriptor composite key '%s' (first at line %d)", pathString(domain, append(parent[:len(parent):len(parent)], l)), line)
		return
	}
	seen[composite] = dn.Line
	node := &EnvoyNode{Path: append(parent[:len(parent):len(parent)], l)}
	shadow := p.flag(f, path, "shadow_mode")
	node.QuotaMode = p.flag(f, path, "quota_mode")
	node.DetailedMetric = p.flag(f, path, "detailed_metric")
	node.ValueToMetric = p.flag(f, path, "value_to_metric")
	l.ShareThreshold = p.flag(f, path, "share_threshold")
	if l.ShareThreshold && !l.wildcard() {
		p.fail(f["share_threshold"], path+".share_threshold", "share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", composite)
	}
	node.Path[len(node.Path)-1] = l
	if rl := f["rate_limit"]; rl != nil && !isNull(rl) {
		if r := p.envoyRateLimit(rl, path+".rate_limit", dn); r != nil {
			r.Domain = domain
			r.Shadow = shadow
			r.Envoy = node
			node.Name = r.ID // the name as written; the ID comes later
			r.ID = ""
			*out = append(*out, r)
		}
	}
	if v := f["descriptors"]; v != nil {
		p.envoyDescriptors(v, path+".descriptors", domain, node.Path, out)
	}
}

// envoyKeyValue reads the key (required) and value of the descriptor dn
// at path, whose fields are f; false when its key is bad.
func (p *parser) envoyKeyValue(dn *yaml.Node, f map[string]*yaml.Node, path string) (EnvoyLevel, bool) {
	v := f["key"]
	if v == nil {
		p.fail(dn, path+".key", "required: descriptor has empty key")
		return EnvoyLevel{}, false
	}
	key, ok := p.str(v, path+".key")
	if !ok {
		return EnvoyLevel{}, false
	}
	if key == "" {
		p.fail(v, path+".key", "required: descriptor has empty key")
		return EnvoyLevel{}, false
	}
	l := EnvoyLevel{Key: key}
	if v := f["value"]; v != nil && !isNull(v) {
		l.Value, _ = p.str(v, path+".value")
	}
	return l, true
}

// flag reads the boolean field name of f, at path; false when absent.
func (p *parser) flag(f map[string]*yaml.Node, path, name string) bool {
	if v := f[name]; v != nil {
		return p.boolean(v, path+"."+name)
	}
	return false
}

// envoyRateLimit reads a rate_limit block into a rule whose ID holds the
// name as written and whose Replaces holds names.
func (p *parser) envoyRateLimit(n *yaml.Node, path string, descriptor *yaml.Node) *Rule {
	before := p.Failures()
	f := p.fields(n, path, envoyRateLimitFields...)
	if f == nil {
		return nil
	}
	r := &Rule{Source: p.pos(descriptor)}
	if v := f["unlimited"]; v != nil {
		r.Unlimited = p.boolean(v, path+".unlimited")
	}
	if v := f["name"]; v != nil {
		r.ID, _ = p.str(v, path+".name")
	}
	period := p.envoyPeriod(n, f, path, r.Unlimited)
	if !r.Unlimited {
		r.Limit, r.Deny = p.envoyLimit(n, f, path, period, p.Failures() == before)
	}
	if v := f["replaces"]; v != nil {
		r.Replaces = p.envoyReplaces(v, path+".replaces", r.ID)
	}
	if p.Failures() > before {
		return nil
	}
	return r
}

// envoyPeriod reads the unit of the rate_limit n at path, whose fields
// are f, as a period: none (0) for an unlimited one, which has no limit.
func (p *parser) envoyPeriod(n *yaml.Node, f map[string]*yaml.Node, path string, unlimited bool) time.Duration {
	var period time.Duration
	unit := f["unit"]
	if unit != nil {
		s, _ := p.str(unit, path+".unit")
		period = envoyUnits[strings.ToUpper(s)]
	}
	switch {
	case unlimited && period > 0:
		p.fail(unit, path+".unit", "should not specify rate limit unit when unlimited")
	case unlimited:
		for _, k := range []string{"requests_per_unit", "algorithm", "burst"} {
			if v := f[k]; v != nil {
				p.fail(v, path+"."+k, "an unlimited rate_limit has no limit")
			}
		}
	case unit == nil:
		p.fail(n, path+".unit", "required (%s)", envoyUnitNames)
	case period == 0:
		p.fail(unit, path+".unit", "invalid rate limit unit '%s' (%s)", unit.Value, envoyUnitNames)
	}
	return period
}

// envoyLimit reads the limit of the rate_limit n at path, whose fields
// are f, over period; deny: its requests_per_unit is 0. The limit is
// validated when the block is good so far (good) and does not deny.
func (p *parser) envoyLimit(n *yaml.Node, f map[string]*yaml.Node, path string, period time.Duration, good bool) (l core.Limit, deny bool) {
	before := p.Failures()
	l = core.Limit{Algorithm: core.FixedWindow, Period: period}
	if v := f["algorithm"]; v != nil {
		l.Algorithm, _ = p.algorithm(v, path+".algorithm")
	}
	if v := f["requests_per_unit"]; v == nil {
		p.fail(n, path+".requests_per_unit", "required")
	} else if rate, ok := p.whole(v, path+".requests_per_unit", 0); ok {
		l.Rate = rate
		deny = rate == 0
	}
	if v := f["burst"]; v != nil {
		if deny {
			p.fail(v, path+".burst", "requests_per_unit 0 denies every request: no burst")
		}
		l.Burst, _ = p.whole(v, path+".burst", 0)
	}
	if good && p.Failures() == before && !deny {
		if err := l.Validate(); err != nil {
			p.limitError(n, f, path, err, map[string]string{"rate": "requests_per_unit", "period": "unit"})
		}
	}
	return l, deny
}

// envoyReplaces reads the replaces list v at path of the rate_limit
// named name: the names it replaces.
func (p *parser) envoyReplaces(v *yaml.Node, path, name string) []string {
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, "must be a list of {name: NAME}")
		return nil
	}
	var names []string
	for i, e := range v.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		ef := p.fields(e, ep, "name")
		if ef == nil {
			continue
		}
		replaced := ""
		if nv := ef["name"]; nv != nil && !isNull(nv) {
			replaced, _ = p.str(nv, ep+".name")
		}
		switch {
		case replaced == "":
			p.fail(e, ep+".name", "should not have an empty replaces entry")
		case replaced == name:
			p.fail(e, ep+".name", "replaces should not contain name of same descriptor")
		default:
			names = append(names, replaced)
		}
	}
	return names
}

// assignEnvoyIDs gives every Envoy rule (ID "") its ID: its rate_limit name
// when it is a valid rule name not yet taken, else its descriptor path
// (domain.key_value.key) folded into the rule-name characters, with a hash
// suffix when it is longer than 64 characters or taken. Then it resolves
// replaces names to the IDs of the domain's rules carrying them.
func assignEnvoyIDs(rs []*Rule) {
	taken := map[string]bool{}
	for _, r := range rs {
		if r.Envoy == nil {
			taken[r.ID] = true
		}
	}
	for _, r := range rs {
		if r.Envoy == nil || r.ID != "" {
			continue
		}
		if n := r.Envoy.Name; n != "" && !taken[n] && core.ValidatePolicyName(n) == nil {
			r.ID = n
			taken[n] = true
			continue
		}
		base := r.Envoy.Name
		if base == "" {
			base = pathString(r.Domain, r.Envoy.Path)
		}
		id := fold(base)
		if len(id) > 64 || taken[id] || id == "" {
			full := sha256.Sum256([]byte(r.Domain + "\x00" + pathString(r.Domain, r.Envoy.Path) + "\x00" + r.Envoy.Name))
			suffix := "-" + hex.EncodeToString(full[:4])
			id = id[:min(len(id), 64-len(suffix))] + suffix
			for i := 2; taken[id]; i++ {
				s := fmt.Sprintf("%s%d", suffix, i)
				id = id[:min(len(id), 64-len(s))] + s
			}
		}
		r.ID = id
		taken[id] = true
	}
	byName := map[string]map[string][]string{} // domain -> name -> IDs
	for _, r := range rs {
		if r.Envoy == nil || r.Envoy.Name == "" {
			continue
		}
		if byName[r.Domain] == nil {
			byName[r.Domain] = map[string][]string{}
		}
		byName[r.Domain][r.Envoy.Name] = append(byName[r.Domain][r.Envoy.Name], r.ID)
	}
	for _, r := range rs {
		if r.Envoy == nil || len(r.Replaces) == 0 {
			continue
		}
		var ids []string
		for _, name := range r.Replaces {
			if got := byName[r.Domain][name]; len(got) > 0 {
				ids = append(ids, got...)
			} else {
				ids = append(ids, name)
			}
		}
		r.Replaces = ids
	}
}

// fold maps s into the rule-name characters a-z A-Z 0-9 _ . : -, each other
// byte becoming _.
func fold(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// isNull reports whether v is YAML's null (a key with nothing after it), which
// envoyproxy/ratelimit reads as the field's zero value.
func isNull(v *yaml.Node) bool { return v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" }
