package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/core"
)

// DefaultMaxBytes is the largest rules file read unless WithMaxBytes says
// otherwise: 4 MiB.
const DefaultMaxBytes = 4 << 20

// DefaultMaxRules is the most rules a file (or directory) may hold unless
// WithMaxRules says otherwise.
const DefaultMaxRules = 10_000

// An Option changes how rules are read.
type Option func(*options)

type options struct {
	maxBytes int64
	maxRules int
	poll     time.Duration
	errs     []error
}

// WithMaxBytes sets the largest rules file accepted, in bytes (default
// DefaultMaxBytes; at least 1).
func WithMaxBytes(n int64) Option {
	return func(o *options) {
		if n < 1 {
			o.errs = append(o.errs, fmt.Errorf("rules: WithMaxBytes: must be at least 1, got %d", n))
			return
		}
		o.maxBytes = n
	}
}

// WithMaxRules sets the most rules a file may hold (default
// DefaultMaxRules; at least 1).
func WithMaxRules(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.errs = append(o.errs, fmt.Errorf("rules: WithMaxRules: must be at least 1, got %d", n))
			return
		}
		o.maxRules = n
	}
}

// WithPollInterval sets how often Watch reads the file (default 1s; at
// least 1ms).
func WithPollInterval(d time.Duration) Option {
	return func(o *options) {
		if d < time.Millisecond {
			o.errs = append(o.errs, fmt.Errorf("rules: WithPollInterval: must be at least 1ms, got %s", d))
			return
		}
		o.poll = d
	}
}

func newOptions(opts []Option) options {
	o := options{maxBytes: DefaultMaxBytes, maxRules: DefaultMaxRules, poll: time.Second}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// Parse reads a rules file's content, in our format or Envoy's (told apart
// by content: a top-level domain: or descriptors: without rules: is
// Envoy's), and validates it as a whole. name is used in errors and
// Positions. Every error is reported, each as "rules: FILE:LINE: field:
// message", joined with errors.Join.
func Parse(name string, data []byte, opts ...Option) (*Snapshot, error) {
	return newOptions(opts).parse(name, data)
}

// parse is Parse under o.
func (o options) parse(name string, data []byte) (*Snapshot, error) {
	if len(o.errs) > 0 {
		return nil, errors.Join(o.errs...)
	}
	if int64(len(data)) > o.maxBytes {
		return nil, fmt.Errorf("rules: %s: the file is larger than %d bytes (see WithMaxBytes)", name, o.maxBytes)
	}
	f, err := o.parseFile(name, data)
	if err != nil {
		return nil, err
	}
	return f.snapshot(revisionOf(data))
}

// revisionOf is the first 12 hex digits of the SHA-256 of data.
func revisionOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// parsed is what one or more files hold, before the snapshot is built.
type parsed struct {
	rules     []*Rule
	tiers     map[string]map[string]string
	tierLines map[string]Position // "dimension\x00identifier" -> where assigned
	domains   map[string]string   // Envoy domain -> file that defines it
}

func (o options) parseFile(name string, data []byte) (*parsed, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("rules: %s: %w", name, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("rules: %s: empty file", name)
	}
	p := &parser{file: name, maxRules: o.maxRules}
	doc := root.Content[0]
	out := &parsed{}
	if isEnvoy(doc) {
		var domain string
		domain, out.rules = p.envoyFile(doc)
		out.domains = map[string]string{domain: name}
	} else {
		out.rules, out.tiers, out.tierLines = p.nativeFile(doc)
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return out, nil
}

// isEnvoy reports whether a document is in envoyproxy/ratelimit's format.
func isEnvoy(doc *yaml.Node) bool {
	if doc.Kind != yaml.MappingNode {
		return false
	}
	has := map[string]bool{}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		has[doc.Content[i].Value] = true
	}
	return !has["rules"] && (has["domain"] || has["descriptors"])
}

// snapshot checks what spans rules (unique names, known tiers) and builds
// the snapshot.
func (f *parsed) snapshot(revision string) (*Snapshot, error) {
	assignEnvoyIDs(f.rules)
	var errs []error
	seen := map[string]*Rule{}
	for _, r := range f.rules {
		if prev, dup := seen[r.ID]; dup {
			errs = append(errs, fmt.Errorf("rules: %s: name: duplicate rule name %q (first at %s)", r.Source, r.ID, prev.Source))
			continue
		}
		seen[r.ID] = r
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s, err := New(revision, f.rules, f.tiers)
	if err != nil {
		return nil, err
	}
	for _, dim := range sortedKeys(f.tiers) {
		known := s.tierNames(dim)
		for _, id := range sortedKeys(f.tiers[dim]) {
			tier := f.tiers[dim][id]
			if !slices.Contains(known, tier) {
				pos := f.tierLines[dim+"\x00"+id]
				list := "no rule of dimension " + dim + " has tiers"
				if len(known) > 0 {
					list = "known: " + strings.Join(known, ", ")
				}
				errs = append(errs, fmt.Errorf("rules: %s: tier_assignments.%s.%s: unknown tier %q (%s)", pos, dim, id, tier, list))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

type parser struct {
	file     string
	maxRules int
	errs     []error
}

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("rules: %s:%d: %s: %s", p.file, n.Line, field, fmt.Sprintf(format, args...)))
}

func (p *parser) pos(n *yaml.Node) Position { return Position{File: p.file, Line: n.Line} }

// fields returns a mapping's values by key, reporting unknown and repeated
// keys.
func (p *parser) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		if path == "" {
			path = "file"
		}
		p.fail(n, path, "must be a mapping")
		return nil
	}
	m := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		field := k
		if path != "" {
			field = path + "." + k
		}
		if !slices.Contains(known, k) {
			p.fail(n.Content[i], field, "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		if _, dup := m[k]; dup {
			p.fail(n.Content[i], field, "given twice")
		}
		m[k] = n.Content[i+1]
	}
	return m
}

// str reads a scalar string.
func (p *parser) str(v *yaml.Node, path string) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" {
		p.fail(v, path, "must be a string")
		return "", false
	}
	return v.Value, true
}

// boolean reads true or false.
func (p *parser) boolean(v *yaml.Node, path string) bool {
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		p.fail(v, path, "must be true or false, got %q", v.Value)
		return false
	}
	return b
}

// whole reads a whole number >= lo: an integer, or a number with no
// fractional part ("5.0", "1e3"); a quoted number or a fraction is an error.
func (p *parser) whole(v *yaml.Node, path string, lo int64) (int64, bool) {
	var n int64
	ok := false
	if v.Kind == yaml.ScalarNode {
		switch v.ShortTag() {
		case "!!int":
			ok = v.Decode(&n) == nil
		case "!!float":
			var f float64
			if v.Decode(&f) == nil && f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
				n, ok = int64(f), true
			}
		}
	}
	if !ok || n < lo {
		p.fail(v, path, "must be a whole number >= %d, got %q", lo, v.Value)
		return 0, false
	}
	return n, true
}

const algorithmNames = "token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, gcra"

// algorithm reads one of the six algorithm names.
func (p *parser) algorithm(v *yaml.Node, path string) (core.Algorithm, bool) {
	a, err := core.ParseAlgorithm(v.Value)
	if err != nil || v.Kind != yaml.ScalarNode {
		p.fail(v, path, "unknown algorithm %q (%s)", v.Value, algorithmNames)
		return 0, false
	}
	return a, true
}

// limit reads algorithm, rate, period and burst of our format, checking
// each field where it stands and the whole with core.Limit.Validate.
func (p *parser) limit(n *yaml.Node, f map[string]*yaml.Node, path string) (core.Limit, bool) {
	before := len(p.errs)
	l := core.Limit{Algorithm: core.TokenBucket}
	if v := f["algorithm"]; v != nil {
		l.Algorithm, _ = p.algorithm(v, path+".algorithm")
	}
	if v := f["rate"]; v == nil {
		p.fail(n, path+".rate", "required")
	} else if r, ok := p.whole(v, path+".rate", 1); ok {
		l.Rate = r
	}
	if v := f["period"]; v == nil {
		p.fail(n, path+".period", "required (for example 1s, 1m, 1h)")
	} else if d, err := time.ParseDuration(v.Value); err != nil || d <= 0 || v.Kind != yaml.ScalarNode {
		p.fail(v, path+".period", "must be a positive duration such as 1s, 1m or 1h, got %q", v.Value)
	} else {
		l.Period = d
	}
	if v := f["burst"]; v != nil {
		if b, ok := p.whole(v, path+".burst", 0); ok {
			l.Burst = b
		}
	}
	if len(p.errs) > before {
		return l, false
	}
	if err := l.Validate(); err != nil {
		p.limitError(n, f, path, err, nil)
		return l, false
	}
	return l, true
}

// limitError reports an error of core.Limit.Validate at the field it names
// (Algorithm, Rate, Period, Burst: algorithm, rate, period, burst, or the
// names given in rename), on that field's line when it is written.
func (p *parser) limitError(n *yaml.Node, f map[string]*yaml.Node, path string, err error, rename map[string]string) {
	msg := strings.TrimPrefix(err.Error(), core.ErrInvalidLimit.Error()+": ")
	field, rest, ok := strings.Cut(msg, ": ")
	name := strings.ToLower(field)
	if r, renamed := rename[name]; renamed {
		name = r
	}
	if !ok || !slices.Contains([]string{"algorithm", "rate", "period", "burst"}, strings.ToLower(field)) {
		p.fail(n, path, "%s", msg)
		return
	}
	if v := f[name]; v != nil {
		n = v
	}
	p.fail(n, path+"."+name, "%s", rest)
}
