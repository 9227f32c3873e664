package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/rulefile"
)

// DefaultMaxBytes is the largest rules file read unless WithMaxBytes says
// otherwise: 4 MiB.
const DefaultMaxBytes = 4 << 20

// DefaultMaxRules is the most rules a file (or directory) may hold unless
// WithMaxRules says otherwise.
const DefaultMaxRules = 10_000

// label begins every error about a rules file.
const label = "rules file"

// An Option changes how rules are read.
type Option func(*options)

type options struct {
	rulefile.Options
	poll time.Duration
}

// WithMaxBytes sets the largest rules file accepted, in bytes (default
// DefaultMaxBytes; at least 1).
func WithMaxBytes(n int64) Option {
	return func(o *options) { o.SetMaxBytes("rules: WithMaxBytes", n) }
}

// WithMaxRules sets the most rules a file may hold (default
// DefaultMaxRules; at least 1).
func WithMaxRules(n int) Option {
	return func(o *options) { o.SetMaxItems("rules: WithMaxRules", n) }
}

// WithPollInterval sets how often Watch reads the file (default 1s; at
// least 1ms).
func WithPollInterval(d time.Duration) Option {
	return func(o *options) {
		if d < time.Millisecond {
			o.Invalid("rules: WithPollInterval", "must be at least 1ms, got %s", d)
			return
		}
		o.poll = d
	}
}

// WithLogger sets where the deprecation notice of a file that spells its
// fields by their old names (rate, period, endpoints; see docs/service.md)
// is logged, once each time its content is read: slog.Default() unless set;
// nil discards it.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.SetLog(l) }
}

func newOptions(opts []Option) options {
	o := options{Options: rulefile.NewOptions(label), poll: time.Second}
	o.MaxBytes, o.MaxItems = DefaultMaxBytes, DefaultMaxRules
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
// Positions. Every error is reported, each as "rules file FILE:LINE:
// field: message", joined with errors.Join.
func Parse(name string, data []byte, opts ...Option) (*Snapshot, error) {
	return newOptions(opts).parse(name, data)
}

// parse is Parse under o.
func (o options) parse(name string, data []byte) (*Snapshot, error) {
	if err := o.Err(); err != nil {
		return nil, err
	}
	if err := o.CheckSize(name, data); err != nil {
		return nil, err
	}
	f, err := o.parseFile(name, data)
	if err != nil {
		return nil, err
	}
	return o.build(f, revisionOf(data))
}

// build is f's snapshot; once it is valid, the deprecation notices of its
// files are logged.
func (o options) build(f *parsed, revision string) (*Snapshot, error) {
	s, err := f.snapshot(revision)
	if err != nil {
		return nil, err
	}
	for _, n := range f.notices {
		o.Notify(n)
	}
	return s, nil
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
	notices   []string            // the files' deprecation notices
}

func (o options) parseFile(name string, data []byte) (*parsed, error) {
	doc, err := o.Decode(name, data)
	if err != nil {
		return nil, err
	}
	p := &parser{Parser: rulefile.NewParser(o.Label, name), maxRules: o.MaxItems}
	out := &parsed{}
	if isEnvoy(doc) {
		var domain string
		domain, out.rules = p.envoyFile(doc)
		out.domains = map[string]string{domain: name}
	} else {
		out.rules, out.tiers, out.tierLines = p.nativeFile(doc)
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	if n := p.Notice(); n != "" {
		out.notices = []string{n}
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
			errs = append(errs, rulefile.Errorf(label, r.Source.File, r.Source.Line, "name", "duplicate rule name %q (first at %s)", r.ID, prev.Source))
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
				errs = append(errs, rulefile.Errorf(label, pos.File, pos.Line, "tier_assignments."+dim+"."+id, "unknown tier %q (%s)", tier, list))
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

// parser reads one file of either format over the shared reader. Its
// methods in lower case are the shared reader's, in the forms the Envoy
// format's reading uses.
type parser struct {
	*rulefile.Parser
	maxRules int
}

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	p.Fail(n, field, format, args...)
}

func (p *parser) pos(n *yaml.Node) Position { return Position{File: p.File(), Line: n.Line} }

// fields returns a mapping's values by key, reporting unknown and repeated
// keys.
func (p *parser) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	m, ok := p.Fields(n, path, rulefile.Plain(known...))
	if !ok {
		return nil
	}
	out := make(map[string]*yaml.Node, len(known))
	for _, k := range known {
		if v := m.Get(k); v != nil {
			out[k] = v
		}
	}
	return out
}

func (p *parser) str(v *yaml.Node, path string) (string, bool) { return p.Str(v, path) }

func (p *parser) boolean(v *yaml.Node, path string) bool {
	b, _ := p.Bool(v, path)
	return b
}

func (p *parser) whole(v *yaml.Node, path string, lo int64) (int64, bool) {
	return p.Whole(v, path, lo)
}

func (p *parser) algorithm(v *yaml.Node, path string) (core.Algorithm, bool) {
	return p.Algorithm(v, path)
}

// limitError reports an error of core.Limit.Validate at the field it names
// (algorithm, rate, period, burst, or the names given in rename), on that
// field's line when it is written.
func (p *parser) limitError(n *yaml.Node, f map[string]*yaml.Node, path string, err error, rename map[string]string) {
	p.LimitError(n, path, err, func(field string) (*yaml.Node, string) {
		if r, ok := rename[field]; ok {
			field = r
		}
		return f[field], path + "." + field
	})
}
