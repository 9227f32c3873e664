package rules

import (
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rulefile"
)

var (
	fileFields = rulefile.Plain("rules", "tier_assignments")
	ruleFields = slices.Concat(rulefile.Plain(rulefile.FieldName, "dimension"),
		[]rulefile.Field{{Name: rulefile.FieldEndpointPattern, Old: "endpoints"}}, rulefile.LimitFields(),
		rulefile.Plain(rulefile.FieldTiers, rulefile.FieldShadow, rulefile.FieldLeaseSeconds, "domain"))
	ruleNoun = rulefile.Noun{One: "rule", Many: "rules", Option: "WithMaxRules"}
)

// nativeFile reads a file of our format: rules and tier_assignments.
func (p *parser) nativeFile(doc *yaml.Node) ([]*Rule, map[string]map[string]string, map[string]Position) {
	f, ok := p.Fields(doc, "", fileFields)
	if !ok {
		return nil, nil, nil
	}
	out := rulefile.Items(p.Parser, f, "rules", ruleNoun, p.maxRules, p.nativeRule)
	var tiers map[string]map[string]string
	var lines map[string]Position
	if ta := f.Get("tier_assignments"); ta != nil {
		tiers, lines = p.tierAssignments(ta)
	}
	return out, tiers, lines
}

// nativeRule reads one rule: the rule fields every file shares (name, the
// limit, endpoint_pattern, tiers, shadow) and the service's own
// (dimension, domain).
func (p *parser) nativeRule(n *yaml.Node, path string) (*Rule, string, bool) {
	before := p.Failures()
	f, ok := p.Fields(n, path, ruleFields)
	if !ok {
		return nil, "", false
	}
	r := &Rule{Source: p.pos(n)}
	r.ID, _ = p.Name(f)
	if v := f.Get("dimension"); v == nil {
		p.Fail(n, f.Path("dimension"), "required (user, ip, api_key or any name)")
	} else if s, ok := p.Str(v, f.Path("dimension")); ok {
		if err := validDimension(s); err != nil {
			p.Fail(v, f.Path("dimension"), "%v", err)
		}
		r.Dimension = s
	}
	if v := f.Get("domain"); v != nil {
		r.Domain, _ = p.Str(v, f.Path("domain"))
	}
	if v := f.Get(rulefile.FieldEndpointPattern); v != nil {
		r.Endpoints = p.Patterns(v, f.Path(rulefile.FieldEndpointPattern))
	}
	r.Limit, _ = p.Limit(f)
	if t := f.Get(rulefile.FieldTiers); t != nil {
		r.Tiers = p.Tiers(t, f.Path(rulefile.FieldTiers))
	}
	if v := f.Get(rulefile.FieldShadow); v != nil {
		r.Shadow, _ = p.Bool(v, f.Path(rulefile.FieldShadow))
	}
	r.Lease, _ = p.Lease(f, r.Limit, r.Tiers)
	return r, r.ID, p.Failures() == before
}

// tierAssignments reads dimension -> identifier -> tier.
func (p *parser) tierAssignments(n *yaml.Node) (map[string]map[string]string, map[string]Position) {
	if n.Kind != yaml.MappingNode {
		p.Fail(n, "tier_assignments", "must be a mapping of dimensions to {identifier: tier}")
		return nil, nil
	}
	out := map[string]map[string]string{}
	lines := map[string]Position{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		dim, dn := n.Content[i].Value, n.Content[i+1]
		dp := "tier_assignments." + dim
		if err := validDimension(dim); err != nil {
			p.Fail(n.Content[i], dp, "%v", err)
			continue
		}
		if _, dup := out[dim]; dup {
			p.Fail(n.Content[i], dp, "given twice")
			continue
		}
		if dn.Kind != yaml.MappingNode {
			p.Fail(dn, dp, "must be a mapping of identifiers to tier names")
			continue
		}
		out[dim] = p.identifierTiers(dn, dp, dim, lines)
	}
	return out, lines
}

// identifierTiers reads one dimension's identifier -> tier, noting where
// each is assigned in lines.
func (p *parser) identifierTiers(dn *yaml.Node, dp, dim string, lines map[string]Position) map[string]string {
	m := map[string]string{}
	for j := 0; j+1 < len(dn.Content); j += 2 {
		id, tv := dn.Content[j].Value, dn.Content[j+1]
		ip := dp + "." + id
		if _, dup := m[id]; dup {
			p.Fail(dn.Content[j], ip, "given twice")
			continue
		}
		tier, ok := p.Str(tv, ip)
		if !ok {
			continue
		}
		if strings.TrimSpace(tier) == "" {
			p.Fail(tv, ip, "a tier name is required")
			continue
		}
		m[id] = tier
		lines[dim+"\x00"+id] = p.pos(tv)
	}
	return m
}
