package rules

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/route"
)

var ruleFields = []string{"name", "dimension", "endpoints", "algorithm", "rate", "period", "burst", "tiers", "shadow", "domain"}

// nativeFile reads a file of our format: rules and tier_assignments.
func (p *parser) nativeFile(doc *yaml.Node) ([]*Rule, map[string]map[string]string, map[string]Position) {
	f := p.fields(doc, "", "rules", "tier_assignments")
	if f == nil {
		return nil, nil, nil
	}
	list := f["rules"]
	var out []*Rule
	switch {
	case list == nil || list.Kind == yaml.ScalarNode && list.ShortTag() == "!!null":
		p.fail(doc, "rules", "at least one rule is required")
	case list.Kind != yaml.SequenceNode:
		p.fail(list, "rules", "must be a list of rules")
	case len(list.Content) == 0:
		p.fail(list, "rules", "at least one rule is required")
	case len(list.Content) > p.maxRules:
		p.fail(list, "rules", "%d rules, more than the limit of %d (see WithMaxRules)", len(list.Content), p.maxRules)
	default:
		seen := map[string]int{}
		for i, rn := range list.Content {
			path := fmt.Sprintf("rules[%d]", i)
			r, ok := p.nativeRule(rn, path)
			if !ok {
				continue
			}
			if line, dup := seen[r.ID]; dup {
				p.fail(rn, path+".name", "duplicate rule name %q (first at line %d)", r.ID, line)
				continue
			}
			seen[r.ID] = rn.Line
			out = append(out, r)
		}
	}
	var tiers map[string]map[string]string
	var lines map[string]Position
	if ta := f["tier_assignments"]; ta != nil {
		tiers, lines = p.tierAssignments(ta)
	}
	return out, tiers, lines
}

func (p *parser) nativeRule(n *yaml.Node, path string) (*Rule, bool) {
	before := len(p.errs)
	f := p.fields(n, path, ruleFields...)
	if f == nil {
		return nil, false
	}
	r := &Rule{Source: p.pos(n)}
	if v := f["name"]; v == nil {
		p.fail(n, path+".name", "required")
	} else if s, ok := p.str(v, path+".name"); ok {
		if err := core.ValidatePolicyName(s); err != nil {
			p.fail(v, path+".name", "%v", strings.TrimPrefix(err.Error(), "Name: "))
		}
		r.ID = s
	}
	if v := f["dimension"]; v == nil {
		p.fail(n, path+".dimension", "required (user, ip, api_key or any name)")
	} else if s, ok := p.str(v, path+".dimension"); ok {
		if err := validDimension(s); err != nil {
			p.fail(v, path+".dimension", "%v", err)
		}
		r.Dimension = s
	}
	if v := f["domain"]; v != nil {
		if s, ok := p.str(v, path+".domain"); ok {
			r.Domain = s
		}
	}
	if v := f["endpoints"]; v != nil {
		r.Endpoints = p.endpoints(v, path+".endpoints")
	}
	r.Limit, _ = p.limit(n, f, path)
	if t := f["tiers"]; t != nil {
		r.Tiers = p.tiers(t, path+".tiers")
	}
	if v := f["shadow"]; v != nil {
		r.Shadow = p.boolean(v, path+".shadow")
	}
	return r, len(p.errs) == before
}

// endpoints reads a list of route patterns (a single string is a list of
// one).
func (p *parser) endpoints(v *yaml.Node, path string) []string {
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		items = v.Content
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		ip := path
		if v.Kind == yaml.SequenceNode {
			ip = fmt.Sprintf("%s[%d]", path, i)
		}
		s, ok := p.str(it, ip)
		if !ok {
			continue
		}
		if err := route.Validate(s); err != nil {
			p.fail(it, ip, "%s", strings.TrimPrefix(err.Error(), "Routes: "))
			continue
		}
		out = append(out, s)
	}
	return out
}

// tiers reads tier name -> limit.
func (p *parser) tiers(t *yaml.Node, path string) map[string]core.Limit {
	if t.Kind != yaml.MappingNode {
		p.fail(t, path, "must be a mapping of tier names to limits")
		return nil
	}
	out := map[string]core.Limit{}
	for i := 0; i+1 < len(t.Content); i += 2 {
		name, tn := t.Content[i].Value, t.Content[i+1]
		tp := path + "." + name
		if strings.TrimSpace(name) == "" {
			p.fail(t.Content[i], fmt.Sprintf("%s[%q]", path, name), "a tier needs a name")
			continue
		}
		if _, dup := out[name]; dup {
			p.fail(t.Content[i], tp, "given twice")
			continue
		}
		tf := p.fields(tn, tp, "algorithm", "rate", "period", "burst")
		if tf == nil {
			continue
		}
		if l, ok := p.limit(tn, tf, tp); ok {
			out[name] = l
		}
	}
	return out
}

// tierAssignments reads dimension -> identifier -> tier.
func (p *parser) tierAssignments(n *yaml.Node) (map[string]map[string]string, map[string]Position) {
	if n.Kind != yaml.MappingNode {
		p.fail(n, "tier_assignments", "must be a mapping of dimensions to {identifier: tier}")
		return nil, nil
	}
	out := map[string]map[string]string{}
	lines := map[string]Position{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		dim, dn := n.Content[i].Value, n.Content[i+1]
		dp := "tier_assignments." + dim
		if err := validDimension(dim); err != nil {
			p.fail(n.Content[i], dp, "%v", err)
			continue
		}
		if _, dup := out[dim]; dup {
			p.fail(n.Content[i], dp, "given twice")
			continue
		}
		if dn.Kind != yaml.MappingNode {
			p.fail(dn, dp, "must be a mapping of identifiers to tier names")
			continue
		}
		m := map[string]string{}
		for j := 0; j+1 < len(dn.Content); j += 2 {
			id, tv := dn.Content[j].Value, dn.Content[j+1]
			ip := dp + "." + id
			if _, dup := m[id]; dup {
				p.fail(dn.Content[j], ip, "given twice")
				continue
			}
			tier, ok := p.str(tv, ip)
			if !ok {
				continue
			}
			if strings.TrimSpace(tier) == "" {
				p.fail(tv, ip, "a tier name is required")
				continue
			}
			m[id] = tier
			lines[dim+"\x00"+id] = p.pos(tv)
		}
		out[dim] = m
	}
	return out, lines
}
