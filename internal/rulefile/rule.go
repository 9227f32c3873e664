package rulefile

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/route"
)

// The names of the rule vocabulary shared by the files and the admin API.
const (
	FieldName            = "name"
	FieldAlgorithm       = "algorithm"
	FieldLimit           = "limit"
	FieldWindowSeconds   = "window_seconds"
	FieldBurst           = "burst"
	FieldEndpointPattern = "endpoint_pattern"
	FieldTiers           = "tiers"
	FieldShadow          = "shadow"
	FieldLeaseSeconds    = "lease_seconds"
)

// The old names of a limit's fields.
const (
	oldLimit  = "rate"
	oldWindow = "period" // a Go duration, where window_seconds is seconds
)

// LimitFields returns the fields of a limit, in a rule, a policy or a
// tier: algorithm, limit, window_seconds, burst.
func LimitFields() []Field {
	return []Field{
		{Name: FieldAlgorithm},
		{Name: FieldLimit, Old: oldLimit},
		{Name: FieldWindowSeconds, Old: oldWindow},
		{Name: FieldBurst},
	}
}

// AlgorithmList is the algorithm names for messages: "token_bucket,
// leaky_bucket, ...".
func AlgorithmList() string { return strings.Join(core.AlgorithmNames(), ", ") }

// Algorithm reads one of the algorithm names.
func (p *Parser) Algorithm(v *yaml.Node, path string) (core.Algorithm, bool) {
	a, err := core.ParseAlgorithm(v.Value)
	if err != nil || v.Kind != yaml.ScalarNode {
		p.Fail(v, path, "unknown algorithm %q (%s)", v.Value, AlgorithmList())
		return 0, false
	}
	return a, true
}

// Limit reads the limit fields of m (LimitFields): algorithm (default
// token_bucket), limit and window_seconds (required), burst. It checks each
// field where it stands, then the whole with core.Limit.Validate, whose
// error it reports at the field it names.
func (p *Parser) Limit(m Mapping) (core.Limit, bool) {
	before := p.Failures()
	l := core.Limit{Algorithm: core.TokenBucket}
	if v := m.Get(FieldAlgorithm); v != nil {
		l.Algorithm, _ = p.Algorithm(v, m.Path(FieldAlgorithm))
	}
	if v := m.Get(FieldLimit); v == nil {
		p.Fail(m.Node, m.Path(FieldLimit), "required (the number of requests per window)")
	} else if r, ok := p.Whole(v, m.Path(FieldLimit), 1); ok {
		l.Rate = r
	}
	l.Period, _ = p.window(m)
	if v := m.Get(FieldBurst); v != nil {
		l.Burst, _ = p.Whole(v, m.Path(FieldBurst), 0)
	}
	if p.Failures() > before {
		return l, false
	}
	if err := l.Validate(); err != nil {
		p.LimitError(m.Node, m.path, err, func(field string) (*yaml.Node, string) {
			name := map[string]string{"rate": FieldLimit, "period": FieldWindowSeconds}[field]
			if name == "" {
				name = field
			}
			return m.Get(name), m.Path(name)
		})
		return l, false
	}
	return l, true
}

// window reads window_seconds, or its old spelling period (a Go duration,
// read as it always was).
func (p *Parser) window(m Mapping) (d time.Duration, ok bool) {
	v, path := m.Get(FieldWindowSeconds), m.Path(FieldWindowSeconds)
	switch {
	case v == nil:
		p.Fail(m.Node, path, "required (the window in seconds, for example 1, 60, 3600)")
		return 0, false
	case m.Written(FieldWindowSeconds) == oldWindow:
		return p.Duration(v, path, "1s, 1m or 1h")
	}
	return p.Seconds(v, path)
}

// LimitError reports err, an error of core.Limit.Validate, at the field of
// the file its *core.FieldError names, with the FieldError's message:
// at(field) returns the node and path of the file's field for core's
// (algorithm, rate, period or burst: core's name in lower case; a nil node
// when the file does not write it, which reports the error at n). An error
// naming no field of a limit is reported at n and path.
func (p *Parser) LimitError(n *yaml.Node, path string, err error, at func(field string) (*yaml.Node, string)) {
	var fe *core.FieldError
	field := ""
	if errors.As(err, &fe) {
		field = strings.ToLower(fe.Field)
	}
	if !slices.Contains([]string{"algorithm", "rate", "period", "burst"}, field) {
		p.Fail(n, path, "%v", err)
		return
	}
	v, fpath := at(field)
	if v == nil {
		v = n
	}
	p.Fail(v, fpath, "%s", fe.Message)
}

// message is what err, a refusal of core's validation, says is wrong,
// without the field its *core.FieldError names (the file names it in its
// own words); the whole text for another error.
func message(err error) string {
	var fe *core.FieldError
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}

// Lease reads lease_seconds of m, the policy's core.Policy.Lease (0 when
// m has none): a positive number of seconds, whole microseconds, that
// core.ValidateLease accepts for l and for every tier's limit (a sliding
// window log cannot be leased), reported at the field.
func (p *Parser) Lease(m Mapping, l core.Limit, tiers map[string]core.Limit) (time.Duration, bool) {
	v := m.Get(FieldLeaseSeconds)
	if v == nil {
		return 0, true
	}
	path := m.Path(FieldLeaseSeconds)
	d, ok := p.Seconds(v, path)
	if !ok {
		return 0, false
	}
	for _, tl := range append([]core.Limit{l}, slices.Collect(maps.Values(tiers))...) {
		if err := core.ValidateLease(d, tl); err != nil {
			p.Fail(v, path, "%s", message(err))
			return 0, false
		}
	}
	return d, true
}

// Name reads the field name of m: required, a valid policy name.
func (p *Parser) Name(m Mapping) (string, bool) {
	v := m.Get(FieldName)
	if v == nil {
		p.Fail(m.Node, m.Path(FieldName), "required")
		return "", false
	}
	s, ok := p.Str(v, m.Path(FieldName))
	if !ok {
		return "", false
	}
	if err := core.ValidatePolicyName(s); err != nil {
		p.Fail(v, m.Path(FieldName), "%s", message(err))
		return s, false
	}
	return s, true
}

// Patterns reads endpoint patterns: one pattern or a list of them, each in
// the route syntax of core.Match.Routes.
func (p *Parser) Patterns(v *yaml.Node, path string) []string {
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
		s, ok := p.Str(it, ip)
		if !ok {
			continue
		}
		if err := route.Validate(s); err != nil {
			p.Fail(it, ip, "%v", err)
			continue
		}
		out = append(out, s)
	}
	return out
}

// Tiers reads a mapping of tier names to limits (LimitFields each).
func (p *Parser) Tiers(t *yaml.Node, path string) map[string]core.Limit {
	if t.Kind != yaml.MappingNode {
		p.Fail(t, path, "must be a mapping of tier names to limits")
		return nil
	}
	out := map[string]core.Limit{}
	for i := 0; i+1 < len(t.Content); i += 2 {
		name, tn := t.Content[i].Value, t.Content[i+1]
		tp := path + "." + name
		if strings.TrimSpace(name) == "" {
			p.Fail(t.Content[i], fmt.Sprintf("%s[%q]", path, name), "a tier needs a name: an empty tier would replace the limit whenever the tier lookup fails")
			continue
		}
		if _, dup := out[name]; dup {
			p.Fail(t.Content[i], tp, "given twice")
			continue
		}
		tf, ok := p.Fields(tn, tp, LimitFields())
		if !ok {
			continue
		}
		if l, ok := p.Limit(tf); ok {
			out[name] = l
		}
	}
	return out
}

// Noun names the items of a file's list in its messages.
type Noun struct {
	// One and Many are the item's name ("rule", "rules").
	One, Many string
	// Option is the option that raises the most items ("WithMaxRules").
	Option string
}

// Items reads the list of field of doc: required and not empty, at most
// max items (counted before any is read), each read by read, which returns
// the item and its name. It returns the valid items in order; a name given
// twice is an error at the second, which is left out.
func Items[T any](p *Parser, doc Mapping, field string, noun Noun, max int, read func(n *yaml.Node, path string) (T, string, bool)) []T {
	list := doc.Get(field)
	switch {
	case list == nil || IsNull(list):
		p.Fail(doc.Node, field, "at least one %s is required", noun.One)
		return nil
	case list.Kind != yaml.SequenceNode:
		p.Fail(list, field, "must be a list of %s", noun.Many)
		return nil
	case len(list.Content) == 0:
		p.Fail(list, field, "at least one %s is required", noun.One)
		return nil
	case len(list.Content) > max:
		p.Fail(list, field, "%d %s, more than the limit of %d (see %s)", len(list.Content), noun.Many, max, noun.Option)
		return nil
	}
	var out []T
	seen := map[string]int{}
	for i, n := range list.Content {
		path := fmt.Sprintf("%s[%d]", field, i)
		item, name, ok := read(n, path)
		if !ok {
			continue
		}
		if line, dup := seen[name]; dup {
			p.Fail(n, path+"."+FieldName, "duplicate %s name %q (first at line %d)", noun.One, name, line)
			continue
		}
		seen[name] = n.Line
		out = append(out, item)
	}
	return out
}
